"""Operands and out= arrays: an array as the row-major matrix the server
takes, an operand that lies in shared memory, what the server will see of
an operand, and the checks that an out= array can receive a result."""

from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from gpucompute import _dtypes
from gpucompute._shared_memory import SharedMemoryBase, region_of
from gpucompute._tensors import TensorBase
from gpucompute.v1 import compute_pb2 as pb


def row_major(array: Any, name: str) -> Tuple[int, np.ndarray]:
    """(wire dtype, row-major little-endian 2-D array) of a 2-D float32,
    float64, float16 or bfloat16 array of any layout, or of a 1-D one, sent
    as one row (1 x N) as the CLI reads a 1-D .npy file."""
    a = np.asarray(array)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise ValueError(
            f"{name}: expected a 2-D array (or 1-D, sent as 1 x N), " f"got shape {a.shape}"
        )
    wire = _dtypes.wire_dtype(a.dtype)
    if wire is None:
        raise TypeError(
            f"{name}: dtype {a.dtype} is not one of {_dtypes.NAMES}; "
            f"convert it first, e.g. {name}.astype(numpy.float32)"
        )
    # Copies only when the array is F-ordered, strided or big-endian.
    if wire != pb.DTYPE_BFLOAT16:
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    else:
        a = np.ascontiguousarray(a)
    return wire, a


def _as_2d(a: np.ndarray) -> np.ndarray:
    return a.reshape(1, -1) if a.ndim == 1 else a


def _wire_view(a: np.ndarray) -> bool:
    """Whether a's memory is a row-major little-endian matrix of a dtype the
    server takes."""
    return (
        a.ndim == 2
        and a.flags.c_contiguous
        and _dtypes.wire_dtype(a.dtype) is not None
        and _dtypes.is_little_endian(a.dtype)
    )


def shm_operand(x: Any, owner) -> Optional[Tuple[SharedMemoryBase, int, Tuple[int, int, int]]]:
    """(region, offset, (wire dtype, rows, cols)) of an operand that lies in an
    open region of `owner` (None: of any client) as a row-major little-endian
    float32/float64 matrix (1-D: one row); else None, and it is sent inline."""
    if not isinstance(x, np.ndarray) or x.size == 0 or x.ndim not in (1, 2):
        return None
    region = region_of(x)
    if region is None or region.closed or (owner is not None and region._client is not owner):
        return None
    a = _as_2d(x)
    if not _wire_view(a):
        return None
    offset = a.ctypes.data - region._address
    return region, offset, (_dtypes.wire_dtype(a.dtype), a.shape[0], a.shape[1])


def operand_shape(x: Any) -> Tuple[Optional[np.dtype], Optional[Tuple[int, int]]]:
    """(dtype, (rows, cols)) of an operand as the server will see it, or
    Nones where the client cannot tell (a tensor named by its id)."""
    if isinstance(x, TensorBase):
        return x.dtype, x.shape
    if isinstance(x, str):
        return None, None
    a = np.asarray(x)
    if a.ndim not in (1, 2) or _dtypes.wire_dtype(a.dtype) is None:
        return None, None
    return a.dtype.newbyteorder("<") if a.dtype.kind == "f" else a.dtype, _as_2d(a).shape


def out_slice(
    out: Any, owner, dtype: Optional[np.dtype], shape: Optional[Tuple[int, int]], name: str = "out"
) -> Tuple[SharedMemoryBase, int, int]:
    """(region, offset, byte_size) of an array that is to receive a result:
    a C-contiguous view of an open region of `owner` with the result's dtype
    and shape (where known; 1-D stands for 1 x N). ValueError otherwise."""
    if not isinstance(out, np.ndarray):
        raise TypeError(
            f"{name}: expected an array from SharedMemoryRegion.ndarray(), "
            f"got {type(out).__name__}"
        )
    region = region_of(out)
    if region is None:
        raise ValueError(
            f"{name}: not a view of a shared-memory region; take it from "
            f"region.ndarray(shape, dtype) of client.shared_memory(nbytes)"
        )
    if region.closed:
        raise ValueError(f"{name}: its shared-memory region {region.name!r} is closed")
    if owner is not None and region._client is not owner:
        raise ValueError(
            f"{name}: its shared-memory region {region.name!r} belongs to " f"another client"
        )
    check_out_array(out, dtype, shape, name)
    return region, out.ctypes.data - region._address, out.nbytes


def check_out_array(
    out: np.ndarray, dtype: Optional[np.dtype], shape: Optional[Tuple[int, int]], name: str = "out"
) -> None:
    """ValueError unless `out` can receive a result: a writable, non-empty,
    C-contiguous little-endian array (float32, float64, float16 or bfloat16)
    of 1 or 2 dimensions,
    of the result's dtype and shape where known."""
    if out.ndim not in (1, 2) or not _wire_view(_as_2d(out)):
        layout = "C-contiguous" if out.flags.c_contiguous else "not C-contiguous"
        raise ValueError(
            f"{name}: expected a C-contiguous little-endian array of "
            f"{_dtypes.NAMES} of 1 or 2 dimensions, got {out.dtype} {out.shape}, {layout}"
        )
    if not out.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    if out.size == 0:
        raise ValueError(f"{name}: an empty array cannot receive a result")
    check_out_matches(out, dtype, shape, None)


def check_out_matches(
    out: np.ndarray,
    dtype: Optional[np.dtype],
    shape: Optional[Tuple[int, int]],
    method: Optional[str],
) -> None:
    """ValueError when out's dtype or shape (1-D: 1 x N) differs from a
    result's; method: the call that already wrote the result there, or None."""
    got = (np.dtype(out.dtype).newbyteorder("<"), _as_2d(out).shape)
    problems = []
    if dtype is not None and got[0] != dtype:
        problems.append(f"dtype {dtype}, out has {out.dtype}")
    if shape is not None and got[1] != tuple(shape):
        problems.append(
            f"shape {shape[0]} x {shape[1]}, out has {out.shape}"
            + (" (1-D is 1 x N)" if out.ndim == 1 else "")
        )
    if problems:
        what = f"{method}: the result written to out has" if method else "out: the result has"
        raise ValueError(f"{what} " + "; ".join(problems))
