"""asyncio client for the gpucompute service (grpc.aio), the same methods as
gpucompute.Client as coroutines.

    async with gpucompute.aio.Client("localhost:50051") as client:
        c = await client.matmul(a, b)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from gpucompute import _common as c
from gpucompute.v1 import compute_pb2 as pb

_UNSET = object()


class Client:
    """See gpucompute.Client for the arguments; create it inside a running
    event loop and share it between tasks."""

    def __init__(self, target: str = "localhost:50051", *, timeout: Optional[float] = 120.0,
                 tls: bool = False, root_certificates: c.PathOrBytes = None,
                 certificate_chain: c.PathOrBytes = None, private_key: c.PathOrBytes = None,
                 server_name: Optional[str] = None, token: Optional[str] = None,
                 token_file: c.PathOrBytes = None, lb: Optional[str] = None,
                 options: Sequence[Tuple[str, Any]] = (), connections: int = 1):
        self._channels = c.Channels(
            grpc.aio, target, tls=tls, root_certificates=root_certificates,
            certificate_chain=certificate_chain, private_key=private_key,
            server_name=server_name, token=token, token_file=token_file, lb=lb, options=options,
            connections=connections)
        self.target = target
        self.timeout = timeout

    async def close(self) -> None:
        for channel in self._channels.channels:
            await channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method: str, request, timeout):
        try:
            return await self._channels.call(method)(
                request, timeout=self.timeout if timeout is _UNSET else timeout,
                metadata=self._channels.metadata)
        except grpc.RpcError as e:
            raise c.error_from_rpc(method, e) from None

    async def matmul(self, a, b, *, variant: str = "", allow_tf32: bool = False,
                     timeout: Optional[float] = _UNSET, report: bool = False
                     ) -> Union[np.ndarray, c.Result]:
        response = await self._call("MatMul", c.matmul_request(a, b, variant, allow_tf32),
                                    timeout)
        return c.result("MatMul", response, report)

    async def transpose(self, x, *, variant: str = "", timeout: Optional[float] = _UNSET,
                        report: bool = False) -> Union[np.ndarray, c.Result]:
        response = await self._call("Transpose", c.transpose_request(x, variant), timeout)
        return c.result("Transpose", response, report)

    async def reduce(self, x, op: Union[str, int] = "sum", axis: Union[str, int, None] = None,
                     *, variant: str = "", timeout: Optional[float] = _UNSET,
                     report: bool = False) -> Union[np.ndarray, c.Result]:
        response = await self._call("Reduce", c.reduce_request(x, op, axis, variant), timeout)
        return c.result("Reduce", response, report)

    async def profile(self, op: str, shape: Sequence[int], dtype: Any = np.float32, *,
                      variants: Sequence[str] = (), reduce_op: str = "sum",
                      axis: Union[str, int, None] = None, warmup: int = 0,
                      repetitions: int = 0, timeout: Optional[float] = _UNSET
                      ) -> c.ProfileResult:
        request = c.profile_request(op, shape, dtype, variants, reduce_op, axis, warmup,
                                    repetitions)
        return c.ProfileResult(await self._call("Profile", request, timeout))

    async def server_info(self, *, timeout: Optional[float] = _UNSET) -> pb.ServerInfo:
        return await self._call("GetServerInfo", pb.ServerInfoRequest(), timeout)
