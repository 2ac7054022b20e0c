"""Request builders: MatMul, Transpose, Reduce, Upload, Download and Profile
requests made from the clients' arguments, which are checked on the way."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from gpucompute import _dtypes, _wire
from gpucompute._operands import check_out_array, operand_shape, out_slice, row_major, shm_operand
from gpucompute._results import _numpy_dtype
from gpucompute._shared_memory import region_of
from gpucompute._tensors import tensor_id
from gpucompute.v1 import compute_pb2 as pb


def _matrix(x: Any, name: str, owner=None) -> list:
    tid = tensor_id(x)
    if tid is not None:
        return _wire.tensor_matrix_parts(tid)
    found = shm_operand(x, owner)
    if found is not None:
        region, offset, (wire_dtype, rows, cols) = found
        size = rows * cols * x.dtype.itemsize
        return _wire.shm_matrix_parts(wire_dtype, rows, cols, region.name, offset, size)
    return _wire.matrix_parts(*row_major(x, name))


def _placement(
    keep: bool,
    ttl_seconds: Optional[int],
    out: Optional[np.ndarray] = None,
    expected: Optional[Tuple[Optional[np.dtype], Optional[Tuple[int, int]]]] = None,
    owner=None,
) -> list:
    if ttl_seconds is not None and not keep:
        raise ValueError("ttl_seconds is the lifetime of a kept result: give it with keep=True")
    if out is None:
        return _wire.output_placement(keep, int(ttl_seconds or 0))
    if keep:
        raise ValueError(
            "keep=True holds the result on the server and out= writes it to shared "
            "memory: give one of them"
        )
    dtype, shape = expected or (None, None)
    region, offset, size = out_slice(out, owner, dtype, shape, "out")
    return _wire.output_placement(False, 0, _wire.shm_slice(region.name, offset, size))


DEFAULT_CHUNK_BYTES = 4 << 20

# The default `timeout` of every method of Client and aio.Client, and of
# their tensors and regions: the client's own (Client(timeout=...)). One
# object for both, so that the twins' signatures are the same.
CLIENT_TIMEOUT = object()


def timeout_or(timeout: Any, default: Optional[float]) -> Optional[float]:
    """A method's `timeout` as sent: the client's own (`default`) where the
    caller left it at CLIENT_TIMEOUT."""
    return default if timeout is CLIENT_TIMEOUT else timeout


def upload_messages(array: Any, ttl_seconds: Optional[int], chunk_bytes: int, owner=None):
    """The UploadRequest messages of `array`: one naming its slice when it is
    a view of a shared-memory region of `owner` (None: any client's), else
    the data in chunks."""
    if int(chunk_bytes) < 1:
        raise ValueError(f"chunk_bytes must be at least 1, got {chunk_bytes}")
    if ttl_seconds is not None and int(ttl_seconds) < 0:
        raise ValueError(f"ttl_seconds must not be negative, got {ttl_seconds}")
    found = shm_operand(array, owner)
    if found is not None:
        region, offset, (wire_dtype, rows, cols) = found
        size = rows * cols * array.dtype.itemsize
        return iter(
            [
                _wire.upload_shm_message(
                    wire_dtype,
                    rows,
                    cols,
                    int(ttl_seconds or 0),
                    _wire.shm_slice(region.name, offset, size),
                )
            ]
        )
    dtype, a = row_major(array, "array")
    return _wire.upload_messages(dtype, a, int(ttl_seconds or 0), int(chunk_bytes))


def download_request(
    tensor: Any, chunk_bytes: int, release: bool, out: Optional[np.ndarray], owner
) -> pb.DownloadRequest:
    tid = tensor_id(tensor)
    if tid is None:
        raise TypeError(f"download takes a Tensor or a tensor id, not {type(tensor).__name__}")
    request = pb.DownloadRequest(tensor_id=tid, chunk_bytes=chunk_bytes, release=release)
    if out is not None:
        dtype, shape = operand_shape(tensor)
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out: expected a numpy array, got {type(out).__name__}")
        if region_of(out) is None:
            # An array of this process: the bytes stream into it.
            check_out_array(out, dtype, shape)
        else:
            region, offset, size = out_slice(out, owner, dtype, shape)
            request.shared_memory.CopyFrom(
                pb.SharedMemorySlice(region=region.name, offset=offset, byte_size=size)
            )
    return request


def _enum_value(enum, prefix: str, value: Union[str, int], what: str, expected: str) -> int:
    """A proto enum's number from its short name ("sum" for REDUCE_OP_SUM), or
    the number itself; an unknown name is a ValueError listing `expected`."""
    if isinstance(value, str):
        try:
            return enum.Value(prefix + value.upper())
        except ValueError:
            raise ValueError(f"{what} {value!r}: expected {expected}") from None
    return int(value)


def reduce_op(op: Union[str, int]) -> int:
    return _enum_value(pb.ReduceOp, "REDUCE_OP_", op, "reduce op", "sum, min, max or mean")


def reduce_axis(axis: Union[str, int, None]) -> int:
    """'all'/None, 'per_row'/1 (numpy axis=1), 'per_column'/0 (numpy axis=0)."""
    named = {
        None: pb.REDUCE_AXIS_ALL,
        "all": pb.REDUCE_AXIS_ALL,
        "per_row": pb.REDUCE_AXIS_PER_ROW,
        1: pb.REDUCE_AXIS_PER_ROW,
        "per_column": pb.REDUCE_AXIS_PER_COLUMN,
        0: pb.REDUCE_AXIS_PER_COLUMN,
    }
    if axis not in named:
        raise ValueError(
            f"axis {axis!r}: expected 'all' (None), 'per_row' (1) or " f"'per_column' (0)"
        )
    return named[axis]


def op_value(op: Union[str, int]) -> int:
    return _enum_value(pb.Op, "OP_", op, "op", "matmul, transpose or reduce")


def dtype_value(dtype: Any) -> int:
    return _dtypes.value(dtype)


def output_dtype_value(output_dtype: Any) -> int:
    """The request's output_dtype: 0 (None: the inputs') or a dtype's wire value."""
    return 0 if output_dtype is None else dtype_value(output_dtype)


def _result_dtype(input_dtype: Optional[np.dtype], output_dtype: int) -> Optional[np.dtype]:
    return input_dtype if output_dtype == 0 else _numpy_dtype("out", output_dtype)


def matmul_request(
    a,
    b,
    variant: str,
    allow_tf32: bool,
    keep: bool = False,
    ttl_seconds: Optional[int] = None,
    out: Optional[np.ndarray] = None,
    owner=None,
    output_dtype: Any = None,
) -> bytes:
    """owner: the client whose shared-memory regions the operands and `out`
    may lie in (None: any client's). output_dtype: None (the inputs'), or
    float32 for float16/bfloat16 inputs."""
    ma, mb = _matrix(a, "a", owner), _matrix(b, "b", owner)
    out_v = output_dtype_value(output_dtype)
    expected = None
    if out is not None:
        (da, sa), (db, sb) = operand_shape(a), operand_shape(b)
        expected = (_result_dtype(da or db, out_v), (sa[0], sb[1]) if sa and sb else None)
    return _wire.matmul_request(
        ma, mb, variant, allow_tf32, _placement(keep, ttl_seconds, out, expected, owner), out_v
    )


def transpose_request(
    x,
    variant: str,
    keep: bool = False,
    ttl_seconds: Optional[int] = None,
    out: Optional[np.ndarray] = None,
    owner=None,
) -> bytes:
    mx = _matrix(x, "x", owner)
    expected = None
    if out is not None:
        dtype, shape = operand_shape(x)
        expected = (dtype, shape[::-1] if shape else None)
    return _wire.transpose_request(mx, variant, _placement(keep, ttl_seconds, out, expected, owner))


def reduce_request(
    x,
    op,
    axis,
    variant: str,
    keep: bool = False,
    ttl_seconds: Optional[int] = None,
    out: Optional[np.ndarray] = None,
    owner=None,
    output_dtype: Any = None,
) -> bytes:
    mx, op_v, axis_v = _matrix(x, "x", owner), reduce_op(op), reduce_axis(axis)
    out_v = output_dtype_value(output_dtype)
    expected = None
    if out is not None:
        dtype, shape = operand_shape(x)
        if shape is not None:
            shape = {
                pb.REDUCE_AXIS_ALL: (1, 1),
                pb.REDUCE_AXIS_PER_ROW: (shape[0], 1),
                pb.REDUCE_AXIS_PER_COLUMN: (1, shape[1]),
            }.get(axis_v)
        expected = (_result_dtype(dtype, out_v), shape)
    return _wire.reduce_request(
        mx, op_v, axis_v, variant, _placement(keep, ttl_seconds, out, expected, owner), out_v
    )


def profile_request(
    op,
    shape: Sequence[int],
    dtype,
    variants,
    reduce_op_,
    axis,
    warmup,
    repetitions,
    counters: bool = False,
    warm_cache: bool = False,
) -> pb.ProfileRequest:
    op_v = op_value(op)
    shape = tuple(int(s) for s in shape)
    if op_v == pb.OP_MATMUL:
        # (m, k, n), the order of a @ b and of the CLI's MxKxN.
        if len(shape) != 3:
            raise ValueError(
                f"matmul shape: expected (m, k, n) for a (m x k) @ b (k x n), " f"got {shape}"
            )
        m, k, n = shape
    else:
        if len(shape) != 2:
            raise ValueError(f"{op} shape: expected (m, n), got {shape}")
        (m, n), k = shape, 0
    return pb.ProfileRequest(
        op=op_v,
        dtype=dtype_value(dtype),
        m=m,
        n=n,
        k=k,
        reduce_op=reduce_op(reduce_op_),
        reduce_axis=reduce_axis(axis),
        variants=list(variants or []),
        warmup=warmup,
        repetitions=repetitions,
        counters=bool(counters),
        warm_cache=bool(warm_cache),
    )
