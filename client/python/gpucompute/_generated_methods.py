"""The methods of Client and aio.Client generated from the service
descriptor: one per unary rpc without a hand-written method."""

from __future__ import annotations

from typing import Any, Optional

from gpucompute.v1 import compute_pb2 as pb


# The rpcs with hand-written methods in Client and aio.Client, by method
# name: they take NumPy arrays, route to replicas or wrap their results.
# Every other unary rpc of the service gets a method generated from the
# service descriptor (add_generated_methods), so a new control rpc needs no
# Python: named in snake_case, it takes the request's fields as keyword
# arguments and returns the response message.
HAND_WRITTEN = {
    "MatMul": "matmul",
    "Transpose": "transpose",
    "Reduce": "reduce",
    "Profile": "profile",
    "GetServerInfo": "server_info",
    "Upload": "upload",
    "Download": "download",
    "ReleaseTensors": "release",
    "ListTensors": "tensors",
    "RegisterSharedMemory": "shared_memory",
    "UnregisterSharedMemory": "unregister_shared_memory",
    "ListSharedMemory": "list_shared_memory",
}


def snake_case(name: str) -> str:
    """ "ListTensors" -> "list_tensors"."""
    return "".join(
        f"_{ch.lower()}" if ch.isupper() and i else ch.lower() for i, ch in enumerate(name)
    )


def add_generated_methods(
    cls, *, asynchronous: bool, unset: Any, hand_written: dict = HAND_WRITTEN
) -> None:
    """Gives `cls` (Client or aio.Client, whose `_call` sends a request) a
    method for each unary rpc not in `hand_written`; checks that each
    hand-written method exists, so a renamed one fails at import."""
    for rpc, name in hand_written.items():
        if not callable(getattr(cls, name, None)):
            raise TypeError(f"{cls.__module__}.{cls.__name__} lacks {name}() for rpc {rpc}")
    for rpc in pb.DESCRIPTOR.services_by_name["Compute"].methods:
        if rpc.name in hand_written:
            continue
        if rpc.client_streaming or rpc.server_streaming:
            raise TypeError(
                f"rpc {rpc.name} streams: it needs hand-written methods "
                "(HAND_WRITTEN in gpucompute/_generated_methods.py)"
            )
        setattr(cls, snake_case(rpc.name), _unary_method(rpc, asynchronous, unset))


def _unary_method(rpc, asynchronous: bool, unset: Any):
    request_type = getattr(pb, rpc.input_type.name)

    def request_of(request, fields):
        if request is not None and fields:
            raise TypeError(f"give {rpc.name} a {request_type.__name__} or its fields, not both")
        return request if request is not None else request_type(**fields)

    if asynchronous:

        async def method(self, request=None, *, timeout: Optional[float] = unset, **fields):
            return await self._call(rpc.name, request_of(request, fields), timeout)

    else:

        def method(self, request=None, *, timeout: Optional[float] = unset, **fields):
            return self._call(rpc.name, request_of(request, fields), timeout)

    method.__name__ = method.__qualname__ = snake_case(rpc.name)
    method.__doc__ = (
        f"Calls {rpc.name}: a {request_type.__name__}, or its fields as keyword "
        f"arguments; returns the {rpc.output_type.name} message."
    )
    return method
