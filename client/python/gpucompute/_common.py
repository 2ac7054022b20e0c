"""What the sync and asyncio clients share: NumPy <-> wire conversion, channel
options and credentials, errors, and the shape of results."""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import itertools
import json
import mmap
import os
import secrets
import threading
import weakref
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from gpucompute import _dtypes, _wire
from gpucompute.v1 import compute_pb2 as pb
from gpucompute.v1 import compute_pb2_grpc as pb_grpc

PathOrBytes = Union[str, Path, bytes, None]



class ComputeError(Exception):
    """A failed RPC: `code` is the grpc.StatusCode, `message` the server's text."""

    def __init__(self, method: str, code: grpc.StatusCode, message: str):
        self.method = method
        self.code = code
        self.message = message
        super().__init__(f"{method} failed: {code.name}: {message}")


def error_from_rpc(method: str, error: grpc.RpcError) -> ComputeError:
    return ComputeError(method, error.code(), error.details() or "")


@dataclasses.dataclass(frozen=True)
class Report:
    """The server's timing of one request, in microseconds."""

    variant: str
    device: str
    queue_us: int
    upload_us: int
    compute_us: int
    download_us: int
    total_us: int
    batch_size: int = 1  # requests that ran together as one batch, this one included

    @classmethod
    def from_proto(cls, r: pb.ExecutionReport) -> "Report":
        return cls(r.variant, r.device, r.queue_us, r.upload_us, r.compute_us, r.download_us,
                   r.total_us, max(1, r.batch_size))


@dataclasses.dataclass(frozen=True)
class Result:
    """A result array with the server's report, from calls made with report=True."""

    output: np.ndarray
    report: Report


def row_major(array: Any, name: str) -> Tuple[int, np.ndarray]:
    """(wire dtype, row-major little-endian 2-D array) of a 2-D float32,
    float64, float16 or bfloat16 array of any layout, or of a 1-D one, sent
    as one row (1 x N) as the CLI reads a 1-D .npy file."""
    a = np.asarray(array)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (or 1-D, sent as 1 x N), "
                         f"got shape {a.shape}")
    wire = _dtypes.wire_dtype(a.dtype)
    if wire is None:
        raise TypeError(f"{name}: dtype {a.dtype} is not one of {_dtypes.NAMES}; "
                        f"convert it first, e.g. {name}.astype(numpy.float32)")
    # Copies only when the array is F-ordered, strided or big-endian.
    if wire != pb.DTYPE_BFLOAT16:
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    else:
        a = np.ascontiguousarray(a)
    return wire, a


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
    server: str                           # the instance holding it

    @classmethod
    def from_proto(cls, t: pb.TensorInfo) -> "TensorInfo":
        return cls(t.id, _info_dtype(t.dtype), (t.rows, t.cols), t.bytes,
                   t.device, datetime.datetime.fromtimestamp(t.expires_unix_ms / 1000,
                                                             datetime.timezone.utc),
                   t.server or instance_of(t.id))


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
        return (f"<{type(self).__name__} {self.id} {self.dtype} {self.shape[0]}x{self.shape[1]}"
                f" on {self.server!r}>")


def tensor_id(x: Any) -> Optional[str]:
    """The tensor id an operand names (a Tensor, or an id string), else None."""
    if isinstance(x, TensorBase):
        return x.id
    if isinstance(x, str):
        return x
    return None


# Shared memory: POSIX shm objects this process creates and the server maps
# (API Part 2). Views of a region carry, in their chain of bases, the buffer
# object made for them, and that object names the region: an operand found to
# lie in a region travels as a SharedMemorySlice instead of its bytes.

_REGION_ATTR = "_gpucompute_region"


@dataclasses.dataclass(frozen=True)
class SharedMemoryInfo:
    """A shared-memory region registered with a server (ListSharedMemory)."""

    name: str         # the client's name for it, used in requests
    key: str          # shm_open name of the object, e.g. "/gpucompute-1234-9f0c..."
    offset: int       # region start inside the object
    byte_size: int
    pinned: bool      # registered for DMA on the server's devices

    @classmethod
    def from_proto(cls, r: pb.SharedMemoryRegion) -> "SharedMemoryInfo":
        return cls(r.name, r.key, r.offset, r.byte_size, r.pinned)


def _posixshmem():
    try:
        import _posixshmem
    except ImportError:
        raise RuntimeError("shared memory needs POSIX shm_open (CPython's _posixshmem), which "
                           "this Python lacks") from None
    return _posixshmem


def create_shm_object(nbytes: int) -> Tuple[str, mmap.mmap]:
    """(key, mapping) of a new POSIX shm object of `nbytes` bytes, readable
    and writable by this user only; the key is its shm_open name."""
    shm = _posixshmem()
    for _ in range(100):
        key = f"/gpucompute-{os.getpid()}-{secrets.token_hex(8)}"
        try:
            fd = shm.shm_open(key, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        except FileExistsError:
            continue
        try:
            os.ftruncate(fd, nbytes)
            return key, mmap.mmap(fd, nbytes)
        except BaseException:
            shm.shm_unlink(key)
            raise
        finally:
            os.close(fd)
    raise FileExistsError("no free shm name found")


def release_shm_object(key: str, mapping: mmap.mmap) -> None:
    """Unlinks the object and unmaps it, unless arrays still view the
    mapping: it is then unmapped when the last of them goes."""
    try:
        _posixshmem().shm_unlink(key)
    except FileNotFoundError:
        pass
    try:
        mapping.close()
    except BufferError:
        pass


def _finalize_region(unregister, key: str, mapping: mmap.mmap) -> None:
    """A region garbage-collected or left open at exit: best effort."""
    if unregister is not None:
        try:
            unregister()
        except Exception:
            pass
    release_shm_object(key, mapping)


class SharedMemoryBase:
    """What gpucompute.SharedMemoryRegion and its asyncio twin share: a POSIX
    shm object this process created, mapped here and registered with the
    server under `name`."""

    def __init__(self, client, index: int, key: str, mapping: mmap.mmap, info: SharedMemoryInfo,
                 unregister_on_gc=None):
        self._client = client
        self._index = index  # the target it is registered with
        self._mmap = mapping
        self._nbytes = len(mapping)
        self.key = key
        self.info = info
        self._closed = False
        probe = ctypes.c_char.from_buffer(mapping)
        self._address = ctypes.addressof(probe)
        del probe  # releases the export, so that close() can unmap
        self._finalizer = weakref.finalize(self, _finalize_region, unregister_on_gc, key, mapping)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def pinned(self) -> bool:
        return self.info.pinned

    @property
    def closed(self) -> bool:
        return self._closed

    def ndarray(self, shape, dtype: Any = np.float32, offset: int = 0) -> np.ndarray:
        """A writable C-contiguous array of `shape` and `dtype` over the
        region's bytes from `offset` on (no copy). matmul, transpose, reduce
        and upload send such an array (or a C-contiguous view of it, e.g. a
        block of rows) as a slice of the region, not its bytes; out= takes
        one to receive a result. The array keeps the region's mapping alive."""
        if self._closed:
            raise ValueError(f"shared-memory region {self.name!r} is closed")
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"shape {shape} has a negative dimension")
        offset = int(offset)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset < 0 or offset + size > self.nbytes:
            raise ValueError(f"{shape} {dtype} at offset {offset} is {size} bytes: past the end "
                             f"of region {self.name!r} ({self.nbytes} bytes)")
        buffer = (ctypes.c_char * size).from_buffer(self._mmap, offset)
        setattr(buffer, _REGION_ATTR, self)  # found again from any view of the array
        return np.frombuffer(buffer, dtype=dtype).reshape(shape)

    def _detach(self) -> bool:
        """Marks it closed; False when it already was. The caller unregisters
        it, then calls _release()."""
        if self._closed:
            return False
        self._closed = True
        self._finalizer.detach()
        return True

    def _release(self) -> None:
        release_shm_object(self.key, self._mmap)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("pinned" if self.pinned else "not pinned")
        return f"<{type(self).__name__} {self.name!r} {self.key} {self.info.byte_size} bytes, {state}>"


def region_of(array: Any) -> Optional[SharedMemoryBase]:
    """The region an array from SharedMemoryBase.ndarray (or a view of one) lies in."""
    base = array
    for _ in range(256):
        if base is None:
            return None
        region = getattr(base, _REGION_ATTR, None)
        if region is not None:
            return region
        base = getattr(base, "base", None)
    return None


def _as_2d(a: np.ndarray) -> np.ndarray:
    return a.reshape(1, -1) if a.ndim == 1 else a


def _wire_view(a: np.ndarray) -> bool:
    """Whether a's memory is a row-major little-endian matrix of a dtype the
    server takes."""
    return (a.ndim == 2 and a.flags.c_contiguous and _dtypes.wire_dtype(a.dtype) is not None
            and _dtypes.is_little_endian(a.dtype))


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


def out_slice(out: Any, owner, dtype: Optional[np.dtype], shape: Optional[Tuple[int, int]],
              name: str = "out") -> Tuple[SharedMemoryBase, int, int]:
    """(region, offset, byte_size) of an array that is to receive a result:
    a C-contiguous view of an open region of `owner` with the result's dtype
    and shape (where known; 1-D stands for 1 x N). ValueError otherwise."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: expected an array from SharedMemoryRegion.ndarray(), "
                        f"got {type(out).__name__}")
    region = region_of(out)
    if region is None:
        raise ValueError(f"{name}: not a view of a shared-memory region; take it from "
                         f"region.ndarray(shape, dtype) of client.shared_memory(nbytes)")
    if region.closed:
        raise ValueError(f"{name}: its shared-memory region {region.name!r} is closed")
    if owner is not None and region._client is not owner:
        raise ValueError(f"{name}: its shared-memory region {region.name!r} belongs to "
                         f"another client")
    check_out_array(out, dtype, shape, name)
    return region, out.ctypes.data - region._address, out.nbytes


def check_out_array(out: np.ndarray, dtype: Optional[np.dtype],
                    shape: Optional[Tuple[int, int]], name: str = "out") -> None:
    """ValueError unless `out` can receive a result: a writable, non-empty,
    C-contiguous little-endian array (float32, float64, float16 or bfloat16)
    of 1 or 2 dimensions,
    of the result's dtype and shape where known."""
    if out.ndim not in (1, 2) or not _wire_view(_as_2d(out)):
        layout = "C-contiguous" if out.flags.c_contiguous else "not C-contiguous"
        raise ValueError(f"{name}: expected a C-contiguous little-endian array of "
                         f"{_dtypes.NAMES} of 1 or 2 dimensions, got {out.dtype} {out.shape}, {layout}")
    if not out.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    if out.size == 0:
        raise ValueError(f"{name}: an empty array cannot receive a result")
    check_out_matches(out, dtype, shape, None)


def check_out_matches(out: np.ndarray, dtype: Optional[np.dtype],
                      shape: Optional[Tuple[int, int]], method: Optional[str]) -> None:
    """ValueError when out's dtype or shape (1-D: 1 x N) differs from a
    result's; method: the call that already wrote the result there, or None."""
    got = (np.dtype(out.dtype).newbyteorder("<"), _as_2d(out).shape)
    problems = []
    if dtype is not None and got[0] != dtype:
        problems.append(f"dtype {dtype}, out has {out.dtype}")
    if shape is not None and got[1] != tuple(shape):
        problems.append(f"shape {shape[0]} x {shape[1]}, out has {out.shape}"
                        + (" (1-D is 1 x N)" if out.ndim == 1 else ""))
    if problems:
        what = f"{method}: the result written to out has" if method else "out: the result has"
        raise ValueError(f"{what} " + "; ".join(problems))


def region_index(*operands) -> Optional[int]:
    """The target holding the region of the first operand in shared memory."""
    for x in operands:
        if isinstance(x, np.ndarray):
            region = region_of(x)
            if region is not None and not region.closed:
                return region._index
    return None


def shared_memory_request(nbytes: int, name: Optional[str]):
    """Validates the arguments of shared_memory(); (nbytes, name)."""
    nbytes = int(nbytes)
    if nbytes < 1:
        raise ValueError(f"nbytes must be at least 1, got {nbytes}")
    if name is not None and not name:
        raise ValueError("a region's name must not be empty")
    return nbytes, name


def region_name(key: str, name: Optional[str]) -> str:
    return name if name is not None else key.lstrip("/")


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


def _placement(keep: bool, ttl_seconds: Optional[int], out: Optional[np.ndarray] = None,
               expected: Optional[Tuple[Optional[np.dtype], Optional[Tuple[int, int]]]] = None,
               owner=None) -> list:
    if ttl_seconds is not None and not keep:
        raise ValueError("ttl_seconds is the lifetime of a kept result: give it with keep=True")
    if out is None:
        return _wire.output_placement(keep, int(ttl_seconds or 0))
    if keep:
        raise ValueError("keep=True holds the result on the server and out= writes it to shared "
                         "memory: give one of them")
    dtype, shape = expected or (None, None)
    region, offset, size = out_slice(out, owner, dtype, shape, "out")
    return _wire.output_placement(False, 0, _wire.shm_slice(region.name, offset, size))


DEFAULT_CHUNK_BYTES = 4 << 20


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
        return iter([_wire.upload_shm_message(wire_dtype, rows, cols, int(ttl_seconds or 0),
                                              _wire.shm_slice(region.name, offset, size))])
    dtype, a = row_major(array, "array")
    return _wire.upload_messages(dtype, a, int(ttl_seconds or 0), int(chunk_bytes))


class Download:
    """Assembles a Download stream into one array allocated once, when the
    first message's TensorInfo gives its size, or into `out`; each chunk is
    copied straight from the received message into it. With `in_region`
    (out is a view of a shared-memory region the request named) the server
    writes the payload there and sends the TensorInfo only; the result is
    `out` either way."""

    def __init__(self, out: Optional[np.ndarray] = None, in_region: bool = False):
        self.info: Optional[TensorInfo] = None
        self._out: Optional[np.ndarray] = None
        self._bytes: Optional[np.ndarray] = None
        self._pos = 0
        self._given = out
        self._in_region = in_region

    def add(self, raw: bytes) -> None:
        try:
            info, (start, end) = _wire.parse_download(raw)
        except Exception as e:
            raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                               f"malformed response: {e}") from None
        if self._out is None:
            np_dtype = _numpy_dtype("Download", info.dtype) if info is not None else None
            if np_dtype is None or info.rows < 0 or info.cols < 0:
                raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                                   f"first message lacks a valid TensorInfo: {info}")
            self.info = TensorInfo.from_proto(info)
            if self._given is not None:
                check_out_matches(self._given, np_dtype, (info.rows, info.cols), "Download")
                self._out = self._given
            else:
                self._out = np.empty((info.rows, info.cols), np_dtype)
            self._bytes = self._out.reshape(-1).view(np.uint8)
        n = end - start
        if self._pos + n > self._bytes.size:
            raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                               f"more than the tensor's {self._bytes.size} bytes")
        if n:
            self._bytes[self._pos:self._pos + n] = np.frombuffer(raw, np.uint8, n, start)
        self._pos += n

    def result(self) -> np.ndarray:
        if self._in_region and self._out is not None and self._pos == 0:
            return self._out  # written to shared memory by the server
        if self._out is None or self._pos != self._bytes.size:
            got = "no message" if self._out is None else f"{self._pos} bytes"
            want = "" if self._out is None else f" of {self._bytes.size}"
            raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                               f"stream ended after {got}{want}")
        return self._out


def download_request(tensor: Any, chunk_bytes: int, release: bool,
                     out: Optional[np.ndarray], owner) -> pb.DownloadRequest:
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
            request.shared_memory.CopyFrom(pb.SharedMemorySlice(region=region.name,
                                                                offset=offset, byte_size=size))
    return request


def reduce_op(op: Union[str, int]) -> int:
    if isinstance(op, str):
        try:
            return pb.ReduceOp.Value("REDUCE_OP_" + op.upper())
        except ValueError:
            raise ValueError(f"reduce op {op!r}: expected sum, min, max or mean") from None
    return int(op)


def reduce_axis(axis: Union[str, int, None]) -> int:
    """'all'/None, 'per_row'/1 (numpy axis=1), 'per_column'/0 (numpy axis=0)."""
    named = {None: pb.REDUCE_AXIS_ALL, "all": pb.REDUCE_AXIS_ALL,
             "per_row": pb.REDUCE_AXIS_PER_ROW, 1: pb.REDUCE_AXIS_PER_ROW,
             "per_column": pb.REDUCE_AXIS_PER_COLUMN, 0: pb.REDUCE_AXIS_PER_COLUMN}
    if axis not in named:
        raise ValueError(f"axis {axis!r}: expected 'all' (None), 'per_row' (1) or "
                         f"'per_column' (0)")
    return named[axis]


def op_value(op: Union[str, int]) -> int:
    if isinstance(op, str):
        try:
            return pb.Op.Value("OP_" + op.upper())
        except ValueError:
            raise ValueError(f"op {op!r}: expected matmul, transpose or reduce") from None
    return int(op)


def dtype_value(dtype: Any) -> int:
    return _dtypes.value(dtype)


def _numpy_dtype(method: str, wire: int) -> Optional[np.dtype]:
    """The NumPy dtype of a result's wire dtype (None: no such dtype); a
    bfloat16 result without ml_dtypes is a ComputeError saying what to install."""
    try:
        return _dtypes.numpy_dtype(wire)
    except ImportError as e:
        raise ComputeError(method, grpc.StatusCode.FAILED_PRECONDITION, str(e)) from None


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
    """"ListTensors" -> "list_tensors"."""
    return "".join(f"_{ch.lower()}" if ch.isupper() and i else ch.lower()
                   for i, ch in enumerate(name))


def add_generated_methods(cls, *, asynchronous: bool, unset: Any,
                          hand_written: dict = HAND_WRITTEN) -> None:
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
            raise TypeError(f"rpc {rpc.name} streams: it needs hand-written methods "
                            "(HAND_WRITTEN in gpucompute/_common.py)")
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
    method.__doc__ = (f"Calls {rpc.name}: a {request_type.__name__}, or its fields as keyword "
                      f"arguments; returns the {rpc.output_type.name} message.")
    return method


# MatMul, Transpose and Reduce travel as raw bytes (see _wire): gRPC neither
# serializes the request nor parses the response.
COMPUTE_METHODS = ("MatMul", "Transpose", "Reduce")

# The port a target without one gets: the server's default.
DEFAULT_PORT = 50051


def with_default_port(target: str) -> str:
    """`target` with DEFAULT_PORT added when it names a host without a port
    ("gpu-host" -> "gpu-host:50051", "dns:///gpu-host" -> "dns:///gpu-host:50051",
    "[::1]" -> "[::1]:50051"), as the C++ client does; targets with a port,
    unix: sockets and other schemes are returned as they are."""
    prefix, host = "", target
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            prefix, host = scheme, target[len(scheme):]
            break
    if not prefix and ":" in target and not target.startswith("["):
        return target
    if not host or "," in host:
        return target
    if host.startswith("["):
        has_port = "]" in host and host.rfind(":") > host.rfind("]")
    else:
        has_port = ":" in host
    return target if has_port else f"{prefix}{host}:{DEFAULT_PORT}"


class Channels:
    """A client's channels, for `module` grpc or grpc.aio, and its calls on
    them: MatMul, Transpose and Reduce (bytes in, bytes out) take turns on
    the channels, the other methods use the first."""

    def __init__(self, module, target: str, connections: int = 1, **setup):
        target = with_default_port(target)
        credentials, opts, self.metadata = channel_setup(target, connections=connections, **setup)
        self.channels = [module.secure_channel(target, credentials, opts) if credentials
                         else module.insecure_channel(target, opts) for _ in range(connections)]
        self._stub = pb_grpc.ComputeStub(self.channels[0])
        self._compute = [{m: ch.unary_unary(f"/gpucompute.v1.Compute/{m}") for m in COMPUTE_METHODS}
                         for ch in self.channels]
        # Upload's messages are written by hand (_wire.upload_messages) and
        # Download's read by hand (Download), so that chunks are copied once.
        self._streams = [{
            "Upload": ch.stream_unary("/gpucompute.v1.Compute/Upload",
                                      response_deserializer=pb.TensorInfo.FromString),
            "Download": ch.unary_stream("/gpucompute.v1.Compute/Download",
                                        request_serializer=pb.DownloadRequest.SerializeToString),
        } for ch in self.channels]
        self._turn = itertools.count()

    def call(self, method: str):
        """The multicallable for `method` ("MatMul", "Profile", ...)."""
        if method in COMPUTE_METHODS:
            return self._compute[next(self._turn) % len(self._compute)][method]
        if method in ("Upload", "Download"):
            return self._streams[next(self._turn) % len(self._streams)][method]
        return getattr(self._stub, method)


class Targets:
    """The Channels of each target a client was given, and which instance
    (TensorInfo.server, the @<instance> suffix of a tensor id) each serves.
    Calls naming no tensor take turns over the targets; a call naming one goes
    to the target whose server holds it. Behind a balanced target (lb=...),
    which replica a channel reaches changes from call to call, so a call
    naming a tensor goes to a channel opened to its instance as an address
    (deploy/README.md: each pod's --instance_name is its pod IP:port)."""

    def __init__(self, module, targets: Union[str, Sequence[str]], connections: int = 1,
                 **setup):
        if isinstance(targets, str):
            targets = [targets]
        targets = list(targets)
        if not targets:
            raise ValueError("give at least one target")
        self.targets = [with_default_port(t) for t in targets]
        self.channels = [Channels(module, t, connections, **setup) for t in targets]
        self.base = len(self.channels)   # the targets given; later ones: instances dialled
        self.balanced = bool(setup.get("lb"))
        self._dial = lambda address: Channels(module, address, connections, **setup)
        self.instances: dict = {}      # instance name -> index into channels
        self.asked: set = set()        # indexes whose GetServerInfo answered
        self._turn = itertools.count()
        self._lock = threading.Lock()

    @property
    def metadata(self):
        return self.channels[0].metadata

    def all_channels(self) -> list:
        return [ch for c in self.channels for ch in c.channels]

    def any(self) -> int:
        """The target of a call that names no tensor."""
        return next(self._turn) % self.base if self.base > 1 else 0

    def learn(self, instance: str, index: int) -> None:
        # A balanced target's channel reaches no one replica in particular.
        if instance and not (self.balanced and index < self.base):
            self.instances.setdefault(instance, index)

    def known(self, instance: str) -> Optional[int]:
        """The target of `instance` if known: learnt from an answer, or a
        target spelt as the instance (the server's default instance name is
        the host:port it listens on)."""
        if instance in self.instances:
            return self.instances[instance]
        if self.balanced:
            return None
        if self.base == 1:
            return 0
        for i, t in enumerate(self.targets):
            if instance and t.split("///")[-1] == with_default_port(instance):
                return i
        return None

    def unasked(self) -> list:
        """Targets whose instance name is not known yet (GetServerInfo tells)."""
        if self.balanced:
            return []
        return [i for i in range(self.base)
                if i not in self.asked and i not in self.instances.values()]

    def unknown(self, instance: str) -> int:
        """The target of an instance no target answered for: behind a
        balanced target a new channel to the instance as an address, else the
        first target (whose server answers NOT_FOUND naming the holder)."""
        if not (self.balanced and instance):
            return 0
        with self._lock:
            if instance not in self.instances:
                self.channels.append(self._dial(instance))
                self.instances[instance] = len(self.channels) - 1
            return self.instances[instance]


def output_dtype_value(output_dtype: Any) -> int:
    """The request's output_dtype: 0 (None: the inputs') or a dtype's wire value."""
    return 0 if output_dtype is None else dtype_value(output_dtype)


def _result_dtype(input_dtype: Optional[np.dtype], output_dtype: int) -> Optional[np.dtype]:
    return input_dtype if output_dtype == 0 else _numpy_dtype("out", output_dtype)


def matmul_request(a, b, variant: str, allow_tf32: bool, keep: bool = False,
                   ttl_seconds: Optional[int] = None, out: Optional[np.ndarray] = None,
                   owner=None, output_dtype: Any = None) -> bytes:
    """owner: the client whose shared-memory regions the operands and `out`
    may lie in (None: any client's). output_dtype: None (the inputs'), or
    float32 for float16/bfloat16 inputs."""
    ma, mb = _matrix(a, "a", owner), _matrix(b, "b", owner)
    out_v = output_dtype_value(output_dtype)
    expected = None
    if out is not None:
        (da, sa), (db, sb) = operand_shape(a), operand_shape(b)
        expected = (_result_dtype(da or db, out_v), (sa[0], sb[1]) if sa and sb else None)
    return _wire.matmul_request(ma, mb, variant, allow_tf32,
                                _placement(keep, ttl_seconds, out, expected, owner), out_v)


def transpose_request(x, variant: str, keep: bool = False,
                      ttl_seconds: Optional[int] = None, out: Optional[np.ndarray] = None,
                      owner=None) -> bytes:
    mx = _matrix(x, "x", owner)
    expected = None
    if out is not None:
        dtype, shape = operand_shape(x)
        expected = (dtype, shape[::-1] if shape else None)
    return _wire.transpose_request(mx, variant,
                                   _placement(keep, ttl_seconds, out, expected, owner))


def reduce_request(x, op, axis, variant: str, keep: bool = False,
                   ttl_seconds: Optional[int] = None, out: Optional[np.ndarray] = None,
                   owner=None, output_dtype: Any = None) -> bytes:
    mx, op_v, axis_v = _matrix(x, "x", owner), reduce_op(op), reduce_axis(axis)
    out_v = output_dtype_value(output_dtype)
    expected = None
    if out is not None:
        dtype, shape = operand_shape(x)
        if shape is not None:
            shape = {pb.REDUCE_AXIS_ALL: (1, 1), pb.REDUCE_AXIS_PER_ROW: (shape[0], 1),
                     pb.REDUCE_AXIS_PER_COLUMN: (1, shape[1])}.get(axis_v)
        expected = (_result_dtype(dtype, out_v), shape)
    return _wire.reduce_request(mx, op_v, axis_v, variant,
                                _placement(keep, ttl_seconds, out, expected, owner), out_v)


def result(method: str, raw: bytes, with_report: bool, make_tensor=None,
           out: Optional[np.ndarray] = None):
    """The result matrix of a compute response: a read-only row-major array
    over the received bytes (no copy; .copy() to modify it), or, for an
    output kept, make_tensor(TensorInfo) (device and expires unknown), or,
    for an output the request placed in shared memory, `out` itself."""
    try:
        r = _wire.parse_response(raw)
    except Exception as e:  # a malformed message, whatever the parser tripped on
        raise ComputeError(method, grpc.StatusCode.INTERNAL, f"malformed response: {e}") from None
    np_dtype = _numpy_dtype(method, r.dtype)
    start, end = r.data
    if out is not None and r.tensor_id is None and np_dtype is not None:
        check_out_matches(out, np_dtype, (r.rows, r.cols), method)
        if r.shared_memory is None:
            # Inline after all (a server that ignored the placement): copied into out.
            if end - start != out.nbytes:
                raise ComputeError(method, grpc.StatusCode.INTERNAL,
                                   f"malformed result matrix: {r.rows} x {r.cols}, "
                                   f"{end - start} bytes")
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, np.uint8, end - start, start)
    elif r.tensor_id is not None and make_tensor is not None and np_dtype is not None:
        out = make_tensor(TensorInfo(r.tensor_id, np_dtype, (r.rows, r.cols),
                                     r.rows * r.cols * np_dtype.itemsize, None, None,
                                     instance_of(r.tensor_id)))
    elif (np_dtype is None or r.rows < 0 or r.cols < 0 or r.tensor_id is not None or
          r.shared_memory is not None or end - start != r.rows * r.cols * np_dtype.itemsize):
        raise ComputeError(method, grpc.StatusCode.INTERNAL,
                           f"malformed result matrix: dtype {r.dtype}, {r.rows} x {r.cols}, "
                           f"{end - start} bytes" +
                           (f", tensor_id {r.tensor_id!r}" if r.tensor_id is not None else "") +
                           (", in shared memory (no out= given)"
                            if r.shared_memory is not None else ""))
    else:
        out = np.frombuffer(raw, dtype=np_dtype, count=r.rows * r.cols,
                            offset=start).reshape(r.rows, r.cols)
    if not with_report:
        return out
    return Result(out, Report.from_proto(r.report if r.report is not None
                                         else pb.ExecutionReport()))


def profile_request(op, shape: Sequence[int], dtype, variants, reduce_op_, axis, warmup,
                    repetitions, counters: bool = False,
                    warm_cache: bool = False) -> pb.ProfileRequest:
    op_v = op_value(op)
    shape = tuple(int(s) for s in shape)
    if op_v == pb.OP_MATMUL:
        # (m, k, n), the order of a @ b and of the CLI's MxKxN.
        if len(shape) != 3:
            raise ValueError(f"matmul shape: expected (m, k, n) for a (m x k) @ b (k x n), "
                             f"got {shape}")
        m, k, n = shape
    else:
        if len(shape) != 2:
            raise ValueError(f"{op} shape: expected (m, n), got {shape}")
        (m, n), k = shape, 0
    return pb.ProfileRequest(op=op_v, dtype=dtype_value(dtype), m=m, n=n, k=k,
                             reduce_op=reduce_op(reduce_op_), reduce_axis=reduce_axis(axis),
                             variants=list(variants or []), warmup=warmup,
                             repetitions=repetitions, counters=bool(counters),
                             warm_cache=bool(warm_cache))


_PROFILE_COLUMNS = ("variant", "ok", "median_us", "min_us", "max_us", "gflops", "gbytes_per_s",
                    "fraction_of_roofline", "max_rel_error", "error", "description", "note")

_COMPARISON_COLUMNS = ("idea", "lesson", "before", "after", "time_ratio", "counter",
                       "counter_before", "counter_after")


class ProfileResult:
    """Rows of a Profile, fastest correct variant first.

    print(result) shows a table; pandas.DataFrame(result.rows) loads it;
    iterating yields one dict per variant. `comparisons` holds one dict per
    pair of variants that differ by one idea and both ran ok (idea, lesson,
    before, after, time_ratio = before's median / after's; counter fields
    stay empty until a server reads hardware counters).
    """

    def __init__(self, response: pb.ProfileResponse):
        self.selected: str = response.selected
        self.device: str = response.device
        self.peak_gbytes_per_s: float = response.peak_gbytes_per_s
        self.peak_read_gbytes_per_s: float = response.peak_read_gbytes_per_s
        self.peak_gflops: float = response.peak_gflops
        self.seed: int = response.seed
        self.cold_cache: bool = response.cold_cache
        self.rows: list = [{c: getattr(v, c) for c in _PROFILE_COLUMNS}
                           for v in response.variants]
        self.comparisons: list = [{c: getattr(x, c) for c in _COMPARISON_COLUMNS}
                                  for x in response.comparisons]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def to_json(self) -> str:
        return json.dumps({"device": self.device, "selected": self.selected, "seed": self.seed,
                           "peak_gbytes_per_s": self.peak_gbytes_per_s,
                           "peak_read_gbytes_per_s": self.peak_read_gbytes_per_s,
                           "peak_gflops": self.peak_gflops, "variants": self.rows,
                           "comparisons": self.comparisons}, indent=2)

    def __str__(self) -> str:
        header = ("variant", "ok", "median_us", "GFLOP/s", "GB/s", "roofline", "max_rel_err")
        body = [(r["variant"], "yes" if r["ok"] else "NO", f"{r['median_us']:.1f}",
                 f"{r['gflops']:.1f}", f"{r['gbytes_per_s']:.1f}",
                 f"{r['fraction_of_roofline']:.3f}", f"{r['max_rel_error']:.2e}")
                for r in self.rows]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        lines = [f"device {self.device}; auto selects {self.selected or '-'}; "
                 f"inputs seed {self.seed}"]
        for row in [header, *body]:
            lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                   for i, (cell, w) in enumerate(zip(row, widths))))
        lines += [f"  {r['variant']}: {r['error']}" for r in self.rows if r["error"]]
        lines += [f"  {r['variant']}: note: {r['note']}" for r in self.rows if r["note"]]
        if self.comparisons:
            lines.append("comparisons (time ratio: before's median / after's)")
            lines += [f"  {x['idea']}: {x['before']} -> {x['after']}  {x['time_ratio']:.2f}x  "
                      f"{x['lesson']}" for x in self.comparisons]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<ProfileResult {len(self.rows)} variants on {self.device!r}>"


def _read(value: PathOrBytes) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def channel_setup(target: str, *, tls: bool, root_certificates: PathOrBytes,
                  certificate_chain: PathOrBytes, private_key: PathOrBytes,
                  server_name: Optional[str], token: Optional[str], token_file: PathOrBytes,
                  lb: Optional[str], options: Sequence[Tuple[str, Any]], connections: int = 1):
    """(credentials or None, channel options, call metadata) for new channels."""
    if connections < 1:
        raise ValueError(f"connections must be at least 1, got {connections}")
    if token and token_file:
        raise ValueError("give the bearer token as token= or token_file=, not both")
    if (certificate_chain is None) != (private_key is None):
        raise ValueError("mutual TLS needs both certificate_chain and private_key")
    if token_file is not None:
        # The first line, as the server reads its --auth_token_file.
        token = _read(token_file).decode().split("\n", 1)[0].strip()
        if not token:
            raise ValueError(f"bearer token file {token_file!s} is empty")
    metadata = (("authorization", f"Bearer {token}"),) if token else ()

    opts = {
        # gRPC's default caps messages at 4 MiB; matrices are larger.
        "grpc.max_send_message_length": -1,
        "grpc.max_receive_message_length": -1,
    }
    if lb:
        # Spreads calls over every address a dns:/// target resolves to.
        opts["grpc.service_config"] = json.dumps({"loadBalancingConfig": [{lb: {}}]})
    if server_name:
        opts["grpc.ssl_target_name_override"] = server_name
    if connections > 1:
        # Otherwise channels with equal options share one connection.
        opts["grpc.use_local_subchannel_pool"] = 1
    opts.update(dict(options))

    credentials = None
    if tls or root_certificates is not None or certificate_chain is not None or server_name:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(root_certificates), private_key=_read(private_key),
            certificate_chain=_read(certificate_chain))
    return credentials, list(opts.items()), metadata
