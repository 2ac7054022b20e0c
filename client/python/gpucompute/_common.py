"""What the sync and asyncio clients share: NumPy <-> wire conversion, channel
options and credentials, errors, and the shape of results."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import threading
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from gpucompute import _wire
from gpucompute.v1 import compute_pb2 as pb
from gpucompute.v1 import compute_pb2_grpc as pb_grpc

PathOrBytes = Union[str, Path, bytes, None]

_WIRE_DTYPE = {4: pb.DTYPE_FLOAT32, 8: pb.DTYPE_FLOAT64}
_NUMPY_DTYPE = {pb.DTYPE_FLOAT32: np.dtype("<f4"), pb.DTYPE_FLOAT64: np.dtype("<f8")}


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

    @classmethod
    def from_proto(cls, r: pb.ExecutionReport) -> "Report":
        return cls(r.variant, r.device, r.queue_us, r.upload_us, r.compute_us, r.download_us,
                   r.total_us)


@dataclasses.dataclass(frozen=True)
class Result:
    """A result array with the server's report, from calls made with report=True."""

    output: np.ndarray
    report: Report


def row_major(array: Any, name: str) -> Tuple[int, np.ndarray]:
    """(wire dtype, row-major little-endian 2-D array) of a 2-D float32/float64
    array of any layout, or of a 1-D one, sent as one row (1 x N) as the CLI
    reads a 1-D .npy file."""
    a = np.asarray(array)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (or 1-D, sent as 1 x N), "
                         f"got shape {a.shape}")
    if a.dtype.kind != "f" or a.dtype.itemsize not in _WIRE_DTYPE:
        raise TypeError(f"{name}: dtype {a.dtype} is neither float32 nor float64; "
                        f"convert it first, e.g. {name}.astype(numpy.float32)")
    # Copies only when the array is F-ordered, strided or big-endian.
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    return _WIRE_DTYPE[a.dtype.itemsize], a


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
        return cls(t.id, _NUMPY_DTYPE.get(t.dtype, np.dtype("V0")), (t.rows, t.cols), t.bytes,
                   t.device, datetime.datetime.fromtimestamp(t.expires_unix_ms / 1000,
                                                             datetime.timezone.utc),
                   t.server or instance_of(t.id))


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


def _matrix(x: Any, name: str) -> list:
    tid = tensor_id(x)
    if tid is not None:
        return _wire.tensor_matrix_parts(tid)
    return _wire.matrix_parts(*row_major(x, name))


def _placement(keep: bool, ttl_seconds: Optional[int]) -> list:
    if ttl_seconds is not None and not keep:
        raise ValueError("ttl_seconds is the lifetime of a kept result: give it with keep=True")
    return _wire.output_placement(keep, int(ttl_seconds or 0))


DEFAULT_CHUNK_BYTES = 4 << 20


def upload_messages(array: Any, ttl_seconds: Optional[int], chunk_bytes: int):
    if int(chunk_bytes) < 1:
        raise ValueError(f"chunk_bytes must be at least 1, got {chunk_bytes}")
    if ttl_seconds is not None and int(ttl_seconds) < 0:
        raise ValueError(f"ttl_seconds must not be negative, got {ttl_seconds}")
    dtype, a = row_major(array, "array")
    return _wire.upload_messages(dtype, a, int(ttl_seconds or 0), int(chunk_bytes))


class Download:
    """Assembles a Download stream into one array allocated once, when the
    first message's TensorInfo gives its size; each chunk is copied straight
    from the received message into it."""

    def __init__(self):
        self.info: Optional[TensorInfo] = None
        self._out: Optional[np.ndarray] = None
        self._bytes: Optional[np.ndarray] = None
        self._pos = 0

    def add(self, raw: bytes) -> None:
        try:
            info, (start, end) = _wire.parse_download(raw)
        except Exception as e:
            raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                               f"malformed response: {e}") from None
        if self._out is None:
            np_dtype = _NUMPY_DTYPE.get(info.dtype) if info is not None else None
            if np_dtype is None or info.rows < 0 or info.cols < 0:
                raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                                   f"first message lacks a valid TensorInfo: {info}")
            self.info = TensorInfo.from_proto(info)
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
        if self._out is None or self._pos != self._bytes.size:
            got = "no message" if self._out is None else f"{self._pos} bytes"
            want = "" if self._out is None else f" of {self._bytes.size}"
            raise ComputeError("Download", grpc.StatusCode.INTERNAL,
                               f"stream ended after {got}{want}")
        return self._out


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
    d = np.dtype(dtype)
    if d.kind != "f" or d.itemsize not in _WIRE_DTYPE:
        raise TypeError(f"dtype {d}: expected float32 or float64")
    return _WIRE_DTYPE[d.itemsize]


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


def matmul_request(a, b, variant: str, allow_tf32: bool, keep: bool = False,
                   ttl_seconds: Optional[int] = None) -> bytes:
    return _wire.matmul_request(_matrix(a, "a"), _matrix(b, "b"), variant, allow_tf32,
                                _placement(keep, ttl_seconds))


def transpose_request(x, variant: str, keep: bool = False,
                      ttl_seconds: Optional[int] = None) -> bytes:
    return _wire.transpose_request(_matrix(x, "x"), variant, _placement(keep, ttl_seconds))


def reduce_request(x, op, axis, variant: str, keep: bool = False,
                   ttl_seconds: Optional[int] = None) -> bytes:
    return _wire.reduce_request(_matrix(x, "x"), reduce_op(op), reduce_axis(axis), variant,
                                _placement(keep, ttl_seconds))


def result(method: str, raw: bytes, with_report: bool, make_tensor=None):
    """The result matrix of a compute response: a read-only row-major array
    over the received bytes (no copy; .copy() to modify it), or, for an
    output kept, make_tensor(TensorInfo) (device and expires unknown)."""
    try:
        r = _wire.parse_response(raw)
    except Exception as e:  # a malformed message, whatever the parser tripped on
        raise ComputeError(method, grpc.StatusCode.INTERNAL, f"malformed response: {e}") from None
    np_dtype = _NUMPY_DTYPE.get(r.dtype)
    start, end = r.data
    if r.tensor_id is not None and make_tensor is not None and np_dtype is not None:
        out = make_tensor(TensorInfo(r.tensor_id, np_dtype, (r.rows, r.cols),
                                     r.rows * r.cols * np_dtype.itemsize, None, None,
                                     instance_of(r.tensor_id)))
    elif (np_dtype is None or r.rows < 0 or r.cols < 0 or r.tensor_id is not None or
          end - start != r.rows * r.cols * np_dtype.itemsize):
        raise ComputeError(method, grpc.StatusCode.INTERNAL,
                           f"malformed result matrix: dtype {r.dtype}, {r.rows} x {r.cols}, "
                           f"{end - start} bytes" +
                           (f", tensor_id {r.tensor_id!r}" if r.tensor_id is not None else ""))
    else:
        out = np.frombuffer(raw, dtype=np_dtype, count=r.rows * r.cols,
                            offset=start).reshape(r.rows, r.cols)
    if not with_report:
        return out
    return Result(out, Report.from_proto(r.report if r.report is not None
                                         else pb.ExecutionReport()))


def profile_request(op, shape: Sequence[int], dtype, variants, reduce_op_, axis, warmup,
                    repetitions) -> pb.ProfileRequest:
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
                             repetitions=repetitions)


_PROFILE_COLUMNS = ("variant", "ok", "median_us", "min_us", "max_us", "gflops", "gbytes_per_s",
                    "fraction_of_roofline", "max_rel_error", "error", "description")


class ProfileResult:
    """Rows of a Profile, fastest correct variant first.

    print(result) shows a table; pandas.DataFrame(result.rows) loads it;
    iterating yields one dict per variant.
    """

    def __init__(self, response: pb.ProfileResponse):
        self.selected: str = response.selected
        self.device: str = response.device
        self.peak_gbytes_per_s: float = response.peak_gbytes_per_s
        self.peak_gflops: float = response.peak_gflops
        self.seed: int = response.seed
        self.rows: list = [{c: getattr(v, c) for c in _PROFILE_COLUMNS}
                           for v in response.variants]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def to_json(self) -> str:
        return json.dumps({"device": self.device, "selected": self.selected, "seed": self.seed,
                           "peak_gbytes_per_s": self.peak_gbytes_per_s,
                           "peak_gflops": self.peak_gflops, "variants": self.rows}, indent=2)

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
