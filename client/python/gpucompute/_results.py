"""What responses become: Report and Result, the array (or Tensor, or out=)
of a MatMul, Transpose or Reduce response, and Download, which assembles a
Download stream."""

from __future__ import annotations

import dataclasses
from typing import Optional

import grpc
import numpy as np

from gpucompute import _dtypes, _wire
from gpucompute._errors import ComputeError
from gpucompute._operands import check_out_matches
from gpucompute._tensors import TensorInfo, instance_of
from gpucompute.v1 import compute_pb2 as pb


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
        return cls(
            r.variant,
            r.device,
            r.queue_us,
            r.upload_us,
            r.compute_us,
            r.download_us,
            r.total_us,
            max(1, r.batch_size),
        )


@dataclasses.dataclass(frozen=True)
class Result:
    """A result array with the server's report, from calls made with report=True."""

    output: np.ndarray
    report: Report


def result(
    method: str, raw: bytes, with_report: bool, make_tensor=None, out: Optional[np.ndarray] = None
):
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
                raise ComputeError(
                    method,
                    grpc.StatusCode.INTERNAL,
                    f"malformed result matrix: {r.rows} x {r.cols}, " f"{end - start} bytes",
                )
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(raw, np.uint8, end - start, start)
    elif r.tensor_id is not None and make_tensor is not None and np_dtype is not None:
        out = make_tensor(
            TensorInfo(
                r.tensor_id,
                np_dtype,
                (r.rows, r.cols),
                r.rows * r.cols * np_dtype.itemsize,
                None,
                None,
                instance_of(r.tensor_id),
            )
        )
    elif (
        np_dtype is None
        or r.rows < 0
        or r.cols < 0
        or r.tensor_id is not None
        or r.shared_memory is not None
        or end - start != r.rows * r.cols * np_dtype.itemsize
    ):
        raise ComputeError(
            method,
            grpc.StatusCode.INTERNAL,
            f"malformed result matrix: dtype {r.dtype}, {r.rows} x {r.cols}, "
            f"{end - start} bytes"
            + (f", tensor_id {r.tensor_id!r}" if r.tensor_id is not None else "")
            + (", in shared memory (no out= given)" if r.shared_memory is not None else ""),
        )
    else:
        out = np.frombuffer(raw, dtype=np_dtype, count=r.rows * r.cols, offset=start).reshape(
            r.rows, r.cols
        )
    if not with_report:
        return out
    return Result(
        out, Report.from_proto(r.report if r.report is not None else pb.ExecutionReport())
    )


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
            raise ComputeError(
                "Download", grpc.StatusCode.INTERNAL, f"malformed response: {e}"
            ) from None
        if self._out is None:
            np_dtype = _numpy_dtype("Download", info.dtype) if info is not None else None
            if np_dtype is None or info.rows < 0 or info.cols < 0:
                raise ComputeError(
                    "Download",
                    grpc.StatusCode.INTERNAL,
                    f"first message lacks a valid TensorInfo: {info}",
                )
            self.info = TensorInfo.from_proto(info)
            if self._given is not None:
                check_out_matches(self._given, np_dtype, (info.rows, info.cols), "Download")
                self._out = self._given
            else:
                self._out = np.empty((info.rows, info.cols), np_dtype)
            self._bytes = self._out.reshape(-1).view(np.uint8)
        n = end - start
        if self._pos + n > self._bytes.size:
            raise ComputeError(
                "Download",
                grpc.StatusCode.INTERNAL,
                f"more than the tensor's {self._bytes.size} bytes",
            )
        if n:
            self._bytes[self._pos : self._pos + n] = np.frombuffer(raw, np.uint8, n, start)
        self._pos += n

    def result(self) -> np.ndarray:
        if self._in_region and self._out is not None and self._pos == 0:
            return self._out  # written to shared memory by the server
        if self._out is None or self._pos != self._bytes.size:
            got = "no message" if self._out is None else f"{self._pos} bytes"
            want = "" if self._out is None else f" of {self._bytes.size}"
            raise ComputeError(
                "Download", grpc.StatusCode.INTERNAL, f"stream ended after {got}{want}"
            )
        return self._out


def _numpy_dtype(method: str, wire: int) -> Optional[np.dtype]:
    """The NumPy dtype of a result's wire dtype (None: no such dtype); a
    bfloat16 result without ml_dtypes is a ComputeError saying what to install."""
    try:
        return _dtypes.numpy_dtype(wire)
    except ImportError as e:
        raise ComputeError(method, grpc.StatusCode.FAILED_PRECONDITION, str(e)) from None
