"""Blocking client for the gpucompute service."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from gpucompute import _common as c
from gpucompute.v1 import compute_pb2 as pb

_UNSET = object()


class Client:
    """Channels to a gpucompute server; safe to share between threads.

    Arrays go in as any 2-D float32/float64 NumPy array (C- or F-ordered,
    strided, either byte order; a 1-D array is one row, 1 x N) and come back
    as read-only row-major 2-D arrays.
    Failed calls raise ComputeError with the gRPC status code and message.

    target: "host:port" or a gRPC target such as "dns:///name:port".
    timeout: default deadline of each call in seconds (None: no deadline).
    tls / root_certificates / certificate_chain / private_key / server_name:
        TLS, on when any is given; certificates as PEM bytes or file paths.
    token / token_file: sent as "authorization: Bearer <token>".
    lb: "round_robin" spreads calls over every address the target resolves to.
    options: extra gRPC channel arguments, as (name, value) pairs.
    connections: channels, each with its own TCP connection, that matmul,
        transpose and reduce calls take turns on (one connection is read by
        one thread at a time on each side).
    """

    def __init__(self, target: str = "localhost:50051", *, timeout: Optional[float] = 120.0,
                 tls: bool = False, root_certificates: c.PathOrBytes = None,
                 certificate_chain: c.PathOrBytes = None, private_key: c.PathOrBytes = None,
                 server_name: Optional[str] = None, token: Optional[str] = None,
                 token_file: c.PathOrBytes = None, lb: Optional[str] = None,
                 options: Sequence[Tuple[str, Any]] = (), connections: int = 1):
        self._channels = c.Channels(
            grpc, target, tls=tls, root_certificates=root_certificates,
            certificate_chain=certificate_chain, private_key=private_key,
            server_name=server_name, token=token, token_file=token_file, lb=lb, options=options,
            connections=connections)
        self.target = target
        self.timeout = timeout

    def close(self) -> None:
        for channel in self._channels.channels:
            channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, timeout):
        try:
            return self._channels.call(method)(
                request, timeout=self.timeout if timeout is _UNSET else timeout,
                metadata=self._channels.metadata)
        except grpc.RpcError as e:
            raise c.error_from_rpc(method, e) from None

    def matmul(self, a, b, *, variant: str = "", allow_tf32: bool = False,
               timeout: Optional[float] = _UNSET, report: bool = False
               ) -> Union[np.ndarray, c.Result]:
        """a @ b for a (m x k) and b (k x n) of the same dtype."""
        response = self._call("MatMul", c.matmul_request(a, b, variant, allow_tf32), timeout)
        return c.result("MatMul", response, report)

    def transpose(self, x, *, variant: str = "", timeout: Optional[float] = _UNSET,
                  report: bool = False) -> Union[np.ndarray, c.Result]:
        response = self._call("Transpose", c.transpose_request(x, variant), timeout)
        return c.result("Transpose", response, report)

    def reduce(self, x, op: Union[str, int] = "sum", axis: Union[str, int, None] = None, *,
               variant: str = "", timeout: Optional[float] = _UNSET, report: bool = False
               ) -> Union[np.ndarray, c.Result]:
        """op is sum/min/max/mean. axis None or 'all' gives 1 x 1, 1 or 'per_row'
        gives rows x 1, 0 or 'per_column' gives 1 x cols (NumPy's axis numbers)."""
        response = self._call("Reduce", c.reduce_request(x, op, axis, variant), timeout)
        return c.result("Reduce", response, report)

    def profile(self, op: str, shape: Sequence[int], dtype: Any = np.float32, *,
                variants: Sequence[str] = (), reduce_op: str = "sum",
                axis: Union[str, int, None] = None, warmup: int = 0, repetitions: int = 0,
                timeout: Optional[float] = _UNSET) -> c.ProfileResult:
        """Times every variant (or `variants`) on server-generated data.
        shape: (m, k, n) for matmul (a is m x k, b is k x n), (m, n) otherwise."""
        request = c.profile_request(op, shape, dtype, variants, reduce_op, axis, warmup,
                                    repetitions)
        return c.ProfileResult(self._call("Profile", request, timeout))

    def server_info(self, *, timeout: Optional[float] = _UNSET) -> pb.ServerInfo:
        """Version, backend, devices and the variants of each op (a protobuf message)."""
        return self._call("GetServerInfo", pb.ServerInfoRequest(), timeout)
