"""Tensors held by the server: TensorInfo (what the server says of one),
TensorList (ListTensors' answer), TensorBase (what both clients' Tensor
classes share) and the tensor id an operand names."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Optional, Tuple

import numpy as np

from gpucompute import _dtypes
from gpucompute.v1 import compute_pb2 as pb


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A tensor held by the server. `device` and `expires` are None where the
    client has not been told them (an output kept; `refresh()` asks)."""

    id: str
    dtype: np.dtype
    shape: Tuple[int, int]
    bytes: int
    device: Optional[str]
    expires: Optional[datetime.datetime]  # idle deadline, UTC; every use renews it
    server: str  # the instance holding it

    @classmethod
    def from_proto(cls, t: pb.TensorInfo) -> "TensorInfo":
        return cls(
            t.id,
            _info_dtype(t.dtype),
            (t.rows, t.cols),
            t.bytes,
            t.device,
            datetime.datetime.fromtimestamp(t.expires_unix_ms / 1000, datetime.timezone.utc),
            t.server or instance_of(t.id),
        )


def _info_dtype(wire: int) -> np.dtype:
    """A listed tensor's NumPy dtype; np.dtype("V<size>") where the client has
    none for it (bfloat16 without ml_dtypes, a dtype newer than the client)."""
    try:
        d = _dtypes.numpy_dtype(wire)
    except ImportError:
        return np.dtype("V2")
    return d if d is not None else np.dtype("V0")


def instance_of(tensor_id: str) -> str:
    """The instance an id names: ids are <32 hex digits>@<instance>."""
    return tensor_id.partition("@")[2]


class TensorList(list):
    """ListTensors: a list of TensorInfo (over every target the client was
    given), with the servers' held_bytes and limit_bytes summed."""

    held_bytes: int = 0
    limit_bytes: int = 0


class TensorBase:
    """What gpucompute.Tensor and gpucompute.aio.Tensor share: a handle on a
    matrix held by the server, named by `id`."""

    def __init__(self, client, info: TensorInfo):
        self._client = client
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def dtype(self) -> np.dtype:
        return self.info.dtype

    @property
    def shape(self) -> Tuple[int, int]:
        return self.info.shape

    @property
    def server(self) -> str:
        return self.info.server

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.id} {self.dtype} {self.shape[0]}x{self.shape[1]}"
            f" on {self.server!r}>"
        )


def tensor_id(x: Any) -> Optional[str]:
    """The tensor id an operand names (a Tensor, or an id string), else None."""
    if isinstance(x, TensorBase):
        return x.id
    if isinstance(x, str):
        return x
    return None
