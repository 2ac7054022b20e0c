"""ComputeError: how a failed RPC reaches the caller of either client."""

from __future__ import annotations

import grpc


class ComputeError(Exception):
    """A failed RPC: `code` is the grpc.StatusCode, `message` the server's text."""

    def __init__(self, method: str, code: grpc.StatusCode, message: str):
        self.method = method
        self.code = code
        self.message = message
        super().__init__(f"{method} failed: {code.name}: {message}")


def error_from_rpc(method: str, error: grpc.RpcError) -> ComputeError:
    return ComputeError(method, error.code(), error.details() or "")
