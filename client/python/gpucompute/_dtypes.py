"""The element types the server takes, and their NumPy dtypes: float32,
float64, float16 and bfloat16 (NumPy has no bfloat16: it comes from the
optional ml_dtypes package, imported only when a bfloat16 matrix is used).
The same table as the server's kernels/include/gpucompute/kernels/dtype.h;
client/python/tests/test_half_precision.py checks that they agree."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from gpucompute.v1 import compute_pb2 as pb

# (wire value, name, NumPy descriptor or None where NumPy has none).
DTYPES = (
    (pb.DTYPE_FLOAT32, "float32", "<f4"),
    (pb.DTYPE_FLOAT64, "float64", "<f8"),
    (pb.DTYPE_FLOAT16, "float16", "<f2"),
    (pb.DTYPE_BFLOAT16, "bfloat16", None),
)

_NAMES = {wire: name for wire, name, _ in DTYPES}
_BY_NAME = {name: wire for wire, name, _ in DTYPES}
_BY_DESCR = {np.dtype(descr): wire for wire, _, descr in DTYPES if descr is not None}

NAMES = ", ".join(name for _, name, _ in DTYPES)


def bfloat16() -> np.dtype:
    """ml_dtypes.bfloat16 as a NumPy dtype; ImportError saying what to install
    when ml_dtypes is missing."""
    try:
        import ml_dtypes
    except ImportError:
        raise ImportError(
            "bfloat16 matrices need the ml_dtypes package "
            "(pip install ml_dtypes); float16, float32 and float64 do not"
        ) from None
    return np.dtype(ml_dtypes.bfloat16)


def wire_dtype(d: np.dtype) -> Optional[int]:
    """The wire value of a NumPy dtype in little-endian (or native) order,
    or None when the server has no such dtype."""
    if d.name == "bfloat16" and d.itemsize == 2:  # ml_dtypes' (already imported by its user)
        return pb.DTYPE_BFLOAT16
    if d.kind != "f":
        return None
    return _BY_DESCR.get(d.newbyteorder("<"))


def is_little_endian(d: np.dtype) -> bool:
    return d.byteorder in ("<", "=", "|") if d.name == "bfloat16" else d == d.newbyteorder("<")


def numpy_dtype(wire: int) -> Optional[np.dtype]:
    """The NumPy dtype of a wire value (None for a value no dtype has;
    ImportError for bfloat16 without ml_dtypes)."""
    if wire == pb.DTYPE_BFLOAT16:
        return bfloat16()
    for value, _, descr in DTYPES:
        if value == wire and descr is not None:
            return np.dtype(descr)
    return None


def name(wire: int) -> str:
    return _NAMES.get(wire, f"dtype {wire}")


def value(dtype: Any) -> int:
    """The wire value of a dtype given as a name ("bfloat16", "float16") or
    anything np.dtype() takes; TypeError otherwise."""
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    wire = wire_dtype(np.dtype(dtype))
    if wire is None:
        raise TypeError(f"dtype {dtype}: expected one of {NAMES}")
    return wire
