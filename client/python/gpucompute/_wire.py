"""MatMul, Transpose and Reduce messages written and read in the protobuf wire
format directly, so that payload bytes are copied once on the way out (into
the message handed to gRPC) and never on the way in (the result array is a
view of the received message). Through protobuf each payload is copied two
or three more times: into the message, into its serialization, and out of
the parsed message. Field numbers are those of compute.proto; the messages
are byte-for-byte what protobuf itself writes.
"""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

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


def matrix_parts(wire_dtype: int, array: np.ndarray) -> List[Part]:
    """A Matrix message for a row-major little-endian 2-D array, whose bytes
    are referenced, not copied."""
    data = memoryview(array).cast("B") if array.size else b""
    header = (_scalar(1, wire_dtype) + _scalar(2, array.shape[0]) + _scalar(3, array.shape[1]))
    # Always written, even empty: data is a member of the payload oneof, and
    # protobuf writes a set member whatever its length.
    header += _key(4, _LEN) + _varint(len(data))
    return [header, data]


def matmul_request(a: List[Part], b: List[Part], variant: str, allow_tf32: bool) -> bytes:
    return b"".join(_message(1, a) + _message(2, b) +
                    [_string(3, variant), _scalar(4, int(allow_tf32))])


def transpose_request(x: List[Part], variant: str) -> bytes:
    return b"".join(_message(1, x) + [_string(2, variant)])


def reduce_request(x: List[Part], op: int, axis: int, variant: str) -> bytes:
    return b"".join(_message(1, x) + [_scalar(2, op), _scalar(3, axis), _string(4, variant)])


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


def parse_response(raw: bytes) -> Tuple[int, int, int, Tuple[int, int], Optional[pb.ExecutionReport]]:
    """(dtype, rows, cols, (start, end) of the data in raw, report) of a
    MatMul, Transpose or Reduce response (all three: matrix 1, report 2)."""
    dtype = rows = cols = 0
    data = (0, 0)
    report = None
    for number, wire_type, value in _Reader(raw).fields():
        if number == 1 and wire_type == _LEN:
            # Later fields win, as in protobuf; a repeated matrix field merges.
            for n, t, v in _Reader(raw, *value).fields():
                if n == 1 and t == _VARINT:
                    dtype = v
                elif n == 2 and t == _VARINT:
                    rows = _int64(v)
                elif n == 3 and t == _VARINT:
                    cols = _int64(v)
                elif n == 4 and t == _LEN:
                    data = v
        elif number == 2 and wire_type == _LEN:
            report = pb.ExecutionReport.FromString(raw[value[0]:value[1]])
    return dtype, rows, cols, data, report
