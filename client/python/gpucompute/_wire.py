"""MatMul, Transpose and Reduce messages (and the data messages of the Upload
and Download streams) written and read in the protobuf wire format directly, so that payload bytes are copied once on the way out (into
the message handed to gRPC) and never on the way in (the result array is a
view of the received message). Through protobuf each payload is copied two
or three more times: into the message, into its serialization, and out of
the parsed message. Field numbers are those of compute.proto; the messages
are byte-for-byte what protobuf itself writes.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple, Union

import numpy as np

from gpucompute.v1 import compute_pb2 as pb

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
Part = Union[bytes, memoryview]


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values take ten bytes, as in protobuf
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _scalar(number: int, value: int) -> bytes:
    """A varint field, left out at its default as proto3 does."""
    return _key(number, _VARINT) + _varint(value) if value else b""


def _string(number: int, value: str) -> bytes:
    if not value:
        return b""
    data = value.encode()
    return _key(number, _LEN) + _varint(len(data)) + data


def _message(number: int, parts: List[Part]) -> List[Part]:
    size = sum(len(p) for p in parts)
    return [_key(number, _LEN) + _varint(size)] + parts


def _bytes_of(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, uncopied. Through a uint8 view:
    the buffer protocol has no format for ml_dtypes' bfloat16."""
    return memoryview(array.reshape(-1).view(np.uint8))


def matrix_parts(wire_dtype: int, array: np.ndarray) -> List[Part]:
    """A Matrix message for a row-major little-endian 2-D array, whose bytes
    are referenced, not copied."""
    data = _bytes_of(array) if array.size else b""
    header = _scalar(1, wire_dtype) + _scalar(2, array.shape[0]) + _scalar(3, array.shape[1])
    # Always written, even empty: data is a member of the payload oneof, and
    # protobuf writes a set member whatever its length.
    header += _key(4, _LEN) + _varint(len(data))
    return [header, data]


def tensor_matrix_parts(tensor_id: str) -> List[Part]:
    """A Matrix naming a tensor held by the server: dtype, rows and cols 0
    (the tensor's own), tensor_id (field 5) written even when empty, as
    protobuf writes a set oneof member."""
    data = tensor_id.encode()
    return [_key(5, _LEN) + _varint(len(data)) + data]


def shm_slice(region: str, offset: int, byte_size: int) -> List[Part]:
    """The fields of a SharedMemorySlice (region 1, offset 2, byte_size 3)."""
    return [_string(1, region) + _scalar(2, offset) + _scalar(3, byte_size)]


def shm_matrix_parts(
    wire_dtype: int, rows: int, cols: int, region: str, offset: int, byte_size: int
) -> List[Part]:
    """A Matrix whose bytes lie in a registered shared-memory region: dtype,
    rows, cols and shared_memory (field 6, a oneof message, written even when
    all its fields are at their defaults, as protobuf writes a set member)."""
    header = _scalar(1, wire_dtype) + _scalar(2, rows) + _scalar(3, cols)
    return [header] + _message(6, shm_slice(region, offset, byte_size))


def output_placement(
    keep: bool, ttl_seconds: int, shared_memory: Optional[List[Part]] = None
) -> List[Part]:
    """Field 10 (OutputPlacement) of MatMul/Transpose/ReduceRequest, or
    nothing when the result comes back inline. shared_memory: the fields of
    the SharedMemorySlice the result is written to (OutputPlacement field 2)."""
    if shared_memory is not None:
        return _message(
            10, [_scalar(1, int(keep))] + _message(2, shared_memory) + [_scalar(3, ttl_seconds)]
        )
    if not keep:
        return []
    return _message(10, [_scalar(1, 1) + _scalar(3, ttl_seconds)])


def matmul_request(
    a: List[Part],
    b: List[Part],
    variant: str,
    allow_tf32: bool,
    output: List[Part] = (),
    output_dtype: int = 0,
) -> bytes:
    return b"".join(
        _message(1, a)
        + _message(2, b)
        + [_string(3, variant), _scalar(4, int(allow_tf32)), _scalar(5, output_dtype)]
        + list(output)
    )


def transpose_request(x: List[Part], variant: str, output: List[Part] = ()) -> bytes:
    return b"".join(_message(1, x) + [_string(2, variant)] + list(output))


def reduce_request(
    x: List[Part], op: int, axis: int, variant: str, output: List[Part] = (), output_dtype: int = 0
) -> bytes:
    return b"".join(
        _message(1, x)
        + [_scalar(2, op), _scalar(3, axis), _string(4, variant), _scalar(5, output_dtype)]
        + list(output)
    )


def upload_messages(
    wire_dtype: int, array: np.ndarray, ttl_seconds: int, chunk_bytes: int
) -> Iterator[bytes]:
    """The UploadRequest stream of a row-major little-endian 2-D array: the
    first message carries dtype, rows, cols, ttl_seconds and the first chunk,
    later ones the next chunk only. Each message copies its chunk once (into
    the bytes handed to gRPC); the whole payload is never copied at once."""
    view = _bytes_of(array) if array.size else memoryview(b"")
    total = len(view)
    header = (
        _scalar(1, wire_dtype)
        + _scalar(2, array.shape[0])
        + _scalar(3, array.shape[1])
        + _scalar(4, ttl_seconds)
    )
    pos = 0
    while True:
        n = min(chunk_bytes, total - pos)
        # bytes data = 5 is no oneof member: left out when empty, as proto3 does.
        data = [_key(5, _LEN) + _varint(n), view[pos : pos + n]] if n else []
        yield b"".join([header] + data)
        header = b""
        pos += n
        if pos >= total:
            return


def upload_shm_message(
    wire_dtype: int, rows: int, cols: int, ttl_seconds: int, shared_memory: List[Part]
) -> bytes:
    """The one UploadRequest of a payload in shared memory: dtype, rows, cols,
    ttl_seconds and shared_memory (field 6), no data."""
    header = _scalar(1, wire_dtype) + _scalar(2, rows) + _scalar(3, cols) + _scalar(4, ttl_seconds)
    return b"".join([header] + _message(6, shared_memory))


class _Reader:
    def __init__(self, buf: bytes, start: int = 0, end: Optional[int] = None):
        self.buf = buf
        self.pos = start
        self.end = len(buf) if end is None else end

    def varint(self) -> int:
        value, shift = 0, 0
        while True:
            if self.pos >= self.end or shift > 63:
                raise ValueError(f"bad varint at byte {self.pos}")
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def fields(self):
        """Yields (number, wire_type, value): an int for varints, a (start,
        end) range for length-delimited values; fixed-width ones are skipped."""
        while self.pos < self.end:
            key = self.varint()
            number, wire_type = key >> 3, key & 7
            if wire_type == _VARINT:
                yield number, wire_type, self.varint()
            elif wire_type == _LEN:
                size = self.varint()
                start = self.pos
                self.pos += size
                if self.pos > self.end:
                    raise ValueError(f"field {number} runs past its message")
                yield number, wire_type, (start, self.pos)
            elif wire_type in (_FIXED64, _FIXED32):
                self.pos += 8 if wire_type == _FIXED64 else 4
            else:
                raise ValueError(f"unsupported wire type {wire_type} at byte {self.pos}")
        if self.pos != self.end:
            raise ValueError("message truncated")


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class Response:
    """A MatMul, Transpose or Reduce response: the result matrix's dtype,
    rows, cols and either the (start, end) range of its data in the raw
    message, its tensor_id (an output kept) or the (start, end) range of its
    SharedMemorySlice (an output written to shared memory), and the report."""

    __slots__ = ("dtype", "rows", "cols", "data", "tensor_id", "shared_memory", "report")

    def __init__(self):
        self.dtype = self.rows = self.cols = 0
        self.data: Tuple[int, int] = (0, 0)
        self.tensor_id: Optional[str] = None
        self.shared_memory: Optional[Tuple[int, int]] = None
        self.report: Optional[pb.ExecutionReport] = None


def parse_response(raw: bytes) -> Response:
    """The fields of a MatMul, Transpose or Reduce response (all three: matrix
    1, report 2)."""
    r = Response()
    for number, wire_type, value in _Reader(raw).fields():
        if number == 1 and wire_type == _LEN:
            # Later fields win, as in protobuf; a repeated matrix field merges,
            # and the last member of the payload oneof seen is the one set.
            for n, t, v in _Reader(raw, *value).fields():
                if n == 1 and t == _VARINT:
                    r.dtype = v
                elif n == 2 and t == _VARINT:
                    r.rows = _int64(v)
                elif n == 3 and t == _VARINT:
                    r.cols = _int64(v)
                elif n == 4 and t == _LEN:
                    r.data, r.tensor_id, r.shared_memory = v, None, None
                elif n == 5 and t == _LEN:
                    r.data, r.tensor_id = (0, 0), bytes(raw[v[0] : v[1]]).decode()
                    r.shared_memory = None
                elif n == 6 and t == _LEN:
                    r.data, r.tensor_id, r.shared_memory = (0, 0), None, v
        elif number == 2 and wire_type == _LEN:
            report = pb.ExecutionReport.FromString(raw[value[0] : value[1]])
            if r.report is None:
                r.report = report
            else:
                r.report.MergeFrom(report)
    return r


def parse_download(raw: bytes) -> Tuple[Optional[pb.TensorInfo], Tuple[int, int]]:
    """(info or None, (start, end) of the data in raw) of a DownloadResponse."""
    info, data = None, (0, 0)
    for number, wire_type, value in _Reader(raw).fields():
        if number == 1 and wire_type == _LEN:
            part = pb.TensorInfo.FromString(raw[value[0] : value[1]])
            if info is None:
                info = part
            else:
                info.MergeFrom(part)
        elif number == 2 and wire_type == _LEN:
            data = value
    return info, data
