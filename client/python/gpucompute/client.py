"""Blocking client for the gpucompute service."""

from __future__ import annotations

import weakref
from collections import defaultdict
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from gpucompute._channels import PathOrBytes, Targets
from gpucompute._errors import ComputeError, error_from_rpc
from gpucompute._generated_methods import add_generated_methods
from gpucompute._profile_result import ProfileResult
from gpucompute._requests import (
    CLIENT_TIMEOUT,
    DEFAULT_CHUNK_BYTES,
    download_request,
    matmul_request,
    profile_request,
    reduce_request,
    timeout_or,
    transpose_request,
    upload_messages,
)
from gpucompute._results import Download, Result, result
from gpucompute._shared_memory import (
    SharedMemoryBase,
    SharedMemoryInfo,
    create_shm_object,
    region_index,
    region_name,
    release_shm_object,
    shared_memory_request,
)
from gpucompute._tensors import TensorBase, TensorInfo, TensorList, instance_of, tensor_id
from gpucompute.v1 import compute_pb2 as pb


class Tensor(TensorBase):
    """A matrix held by the server (from Client.upload, or an op with
    keep=True). Pass it to matmul/transpose/reduce in place of an array;
    `with client.upload(a) as t:` releases it on leaving the block.

    info: TensorInfo(id, dtype, shape, bytes, device, expires, server), as the
        server answered the Upload; for an output kept, device and expires are
        None until refresh().
    """

    def download(
        self,
        *,
        release: bool = False,
        chunk_bytes: int = 0,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> np.ndarray:
        """The matrix as a new writable row-major array, or written into
        `out` (an array of its shape and dtype, or a view of a shared-memory
        region) and `out` returned."""
        return self._client.download(
            self, release=release, chunk_bytes=chunk_bytes, out=out, timeout=timeout
        )

    def release(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> bool:
        """Frees it on the server; False when it was no longer held."""
        return self._client.release(self, timeout=timeout) == 1

    def refresh(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> TensorInfo:
        """Asks the server for the current info (ListTensors on its holder)."""
        self.info = self._client._tensor_info(self.id, timeout)
        return self.info

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class SharedMemoryRegion(SharedMemoryBase):
    """A POSIX shared-memory object this process created and the server
    mapped (Client.shared_memory). `region.ndarray(shape, dtype, offset=0)`
    gives arrays over its bytes that ops read in place and that out= fills.
    `close()` (or leaving `with`) unregisters it, unlinks the object and
    unmaps it once no array views it.

    name: the name the server knows it by; key: the object's shm_open name;
    nbytes: its size; pinned: whether the server registered it for DMA;
    info: SharedMemoryInfo as the server answered.
    """

    def close(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> None:
        """Unregisters it (a region the server no longer knows is fine),
        unlinks the object and unmaps it, or leaves the mapping to the arrays
        still viewing it (they stay valid; ops then send their bytes inline).
        Calling it again does nothing."""
        if not self._detach():
            return
        try:
            self._client._unregister_region(self.name, self._index, timeout)
        finally:
            self._release()

    def __enter__(self) -> "SharedMemoryRegion":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Client:
    """Channels to a gpucompute server; safe to share between threads.

    Arrays go in as any 2-D float32/float64 NumPy array (C- or F-ordered,
    strided, either byte order; a 1-D array is one row, 1 x N) and come back
    as read-only row-major 2-D arrays.
    Failed calls raise ComputeError with the gRPC status code and message.

    target: "host:port" or a gRPC target such as "dns:///name:port", or a list
        of them (replicas): calls naming no tensor take turns over them, a
        call naming a tensor goes to the one whose server holds it.
    timeout: default deadline of each call in seconds (None: no deadline).
    tls / root_certificates / certificate_chain / private_key / server_name:
        TLS, on when any is given; certificates as PEM bytes or file paths.
    token / token_file: sent as "authorization: Bearer <token>".
    lb: "round_robin" spreads calls over every address the target resolves to.
    options: extra gRPC channel arguments, as (name, value) pairs.
    connections: channels, each with its own TCP connection, that matmul,
        transpose and reduce calls take turns on (one connection is read by
        one thread at a time on each side).

    Shared memory (a server on this host run with --allow_shared_memory):
    client.shared_memory(nbytes) returns a SharedMemoryRegion; arrays from
    its ndarray() go to ops and upload without their bytes being sent, and
    out= on matmul, transpose, reduce and download receives a result there.
    """

    def __init__(
        self,
        target: Union[str, Sequence[str]] = "localhost:50051",
        *,
        timeout: Optional[float] = 120.0,
        tls: bool = False,
        root_certificates: PathOrBytes = None,
        certificate_chain: PathOrBytes = None,
        private_key: PathOrBytes = None,
        server_name: Optional[str] = None,
        token: Optional[str] = None,
        token_file: PathOrBytes = None,
        lb: Optional[str] = None,
        options: Sequence[Tuple[str, Any]] = (),
        connections: int = 1,
    ):
        self._targets = Targets(
            grpc,
            target,
            tls=tls,
            root_certificates=root_certificates,
            certificate_chain=certificate_chain,
            private_key=private_key,
            server_name=server_name,
            token=token,
            token_file=token_file,
            lb=lb,
            options=options,
            connections=connections,
        )
        self._channels = self._targets.channels[0]
        self.target = target
        self.timeout = timeout
        self._regions = weakref.WeakSet()

    def close(self) -> None:
        """Closes the shared-memory regions still open, then the channels."""
        for region in list(self._regions):
            try:
                region.close()
            except ComputeError:
                pass
        for channel in self._targets.all_channels():
            channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, timeout, index: int = 0):
        try:
            return self._targets.channels[index].call(method)(
                request,
                timeout=timeout_or(timeout, self.timeout),
                metadata=self._targets.metadata,
            )
        except grpc.RpcError as e:
            raise error_from_rpc(method, e) from None

    # Replicas: which target holds a tensor.

    def _index(self, instance: str) -> int:
        i = self._targets.known(instance)
        if i is None:
            for j in self._targets.unasked():
                try:
                    info = self._call("GetServerInfo", pb.ServerInfoRequest(), self.timeout, j)
                except ComputeError:
                    continue
                self._targets.asked.add(j)
                self._targets.learn(info.instance_name, j)
            i = self._targets.known(instance)
        return self._targets.unknown(instance) if i is None else i

    def _route(self, *operands) -> int:
        ids = [t for t in map(tensor_id, operands) if t is not None]
        if ids:
            return self._index(instance_of(ids[0]))
        index = region_index(*operands)
        return self._targets.any() if index is None else index

    def _tensor(self, index: int):
        def make(info: TensorInfo) -> Tensor:
            self._targets.learn(info.server, index)
            return Tensor(self, info)

        return make

    def _compute(
        self,
        method: str,
        request: bytes,
        index: int,
        timeout,
        report: bool,
        out: Optional[np.ndarray] = None,
    ):
        response = self._call(method, request, timeout, index)
        return result(method, response, report, self._tensor(index), out)

    # Shared memory.

    def shared_memory(
        self, nbytes: int, *, name: Optional[str] = None, timeout: Optional[float] = CLIENT_TIMEOUT
    ) -> SharedMemoryRegion:
        """Creates a POSIX shared-memory object of `nbytes` bytes (readable
        and writable by this user only) and registers it with the server (the
        first target's; it must run on this host with --allow_shared_memory)
        under `name` (default: unique, from the object's name). The server
        maps it and, with a GPU, pins it for DMA."""
        nbytes, name = shared_memory_request(nbytes, name)
        key, mapping = create_shm_object(nbytes)
        name = region_name(key, name)
        try:
            answer = self._call(
                "RegisterSharedMemory",
                pb.RegisterSharedMemoryRequest(name=name, key=key, byte_size=nbytes),
                timeout,
                0,
            )
        except BaseException:
            release_shm_object(key, mapping)
            raise
        client = weakref.ref(self)

        def unregister_on_gc():
            if client() is not None:
                client()._unregister_quietly(name)

        region = SharedMemoryRegion(
            self, 0, key, mapping, SharedMemoryInfo.from_proto(answer), unregister_on_gc
        )
        self._regions.add(region)
        return region

    def _unregister_region(self, name: str, index: int, timeout) -> None:
        try:
            self._call(
                "UnregisterSharedMemory",
                pb.UnregisterSharedMemoryRequest(name=name),
                timeout,
                index,
            )
        except ComputeError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise

    def _unregister_quietly(self, name: str) -> None:
        self._call("UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(name=name), 5.0)

    def list_shared_memory(
        self, *, timeout: Optional[float] = CLIENT_TIMEOUT
    ) -> List[SharedMemoryInfo]:
        """The regions registered with the server (the first target's), by
        this client and any other."""
        r = self._call("ListSharedMemory", pb.ListSharedMemoryRequest(), timeout, 0)
        return [SharedMemoryInfo.from_proto(x) for x in r.regions]

    def unregister_shared_memory(
        self, name: str = "", *, timeout: Optional[float] = CLIENT_TIMEOUT
    ) -> int:
        """Unregisters a region by name ("": every region on the server,
        e.g. those a crashed process left); the number unregistered. Prefer
        region.close(), which also unlinks the object."""
        return self._call(
            "UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(name=name), timeout, 0
        ).unregistered

    # Tensors.

    def upload(
        self,
        array,
        ttl_seconds: Optional[int] = None,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> Tensor:
        """Holds `array` (2-D float32/float64, any layout; 1-D is 1 x N) on the
        server, streamed in messages of `chunk_bytes` of data: any size the
        server's tensor budget admits. ttl_seconds: idle lifetime (None: the
        server's default). An array of a shared-memory region (region.ndarray)
        is sent as one message naming its slice: the server reads the bytes."""
        messages = upload_messages(array, ttl_seconds, chunk_bytes, self)
        index = self._route(array)
        info = TensorInfo.from_proto(self._call("Upload", messages, timeout, index))
        self._targets.learn(info.server, index)
        return Tensor(self, info)

    def download(
        self,
        tensor,
        *,
        release: bool = False,
        chunk_bytes: int = 0,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> np.ndarray:
        """The matrix of a Tensor (or id) as a new writable row-major array,
        allocated once and filled chunk by chunk. release: free it once sent.
        chunk_bytes: data bytes per message (0: the server's default).
        out: an array of the tensor's shape and dtype (C-contiguous) to fill
        instead of a new one, e.g. the same array each time a loop downloads
        (no fresh pages to fault in); a view of a shared-memory region: the
        server writes the matrix there. out is returned."""
        request = download_request(tensor, chunk_bytes, release, out, self)
        tid = request.tensor_id
        index = self._index(instance_of(tid))
        out = Download(out, request.HasField("shared_memory"))
        try:
            for raw in self._targets.channels[index].call("Download")(
                request,
                timeout=timeout_or(timeout, self.timeout),
                metadata=self._targets.metadata,
            ):
                out.add(raw)
        except grpc.RpcError as e:
            raise error_from_rpc("Download", e) from None
        if isinstance(tensor, Tensor) and out.info is not None:
            tensor.info = out.info
        return out.result()

    def release(self, *tensors, timeout: Optional[float] = CLIENT_TIMEOUT) -> int:
        """Frees Tensors (or ids) on the servers holding them; the number that
        were still held (ids unknown, released or expired are skipped)."""
        groups = defaultdict(list)
        for t in tensors:
            tid = tensor_id(t)
            if tid is None:
                raise TypeError(f"release takes Tensors or tensor ids, not {type(t).__name__}")
            groups[self._index(instance_of(tid))].append(tid)
        released = 0
        for index, ids in groups.items():
            released += self._call(
                "ReleaseTensors", pb.ReleaseTensorsRequest(tensor_ids=ids), timeout, index
            ).released
        return released

    def tensors(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> TensorList:
        """Every tensor held, over all targets: a list of TensorInfo with
        .held_bytes and .limit_bytes (summed over the servers)."""
        out = TensorList()
        for index in range(self._targets.base):
            r = self._call("ListTensors", pb.ListTensorsRequest(), timeout, index)
            out.extend(TensorInfo.from_proto(t) for t in r.tensors)
            out.held_bytes += r.held_bytes
            out.limit_bytes += r.limit_bytes
            for t in r.tensors:
                self._targets.learn(t.server, index)
        return out

    def _tensor_info(self, tid: str, timeout) -> TensorInfo:
        index = self._index(instance_of(tid))
        r = self._call("ListTensors", pb.ListTensorsRequest(), timeout, index)
        for t in r.tensors:
            if t.id == tid:
                return TensorInfo.from_proto(t)
        raise ComputeError(
            "ListTensors",
            grpc.StatusCode.NOT_FOUND,
            f"tensor {tid} is not held: released or expired",
        )

    def matmul(
        self,
        a,
        b,
        *,
        variant: str = "",
        allow_tf32: bool = False,
        output_dtype: Any = None,
        keep: bool = False,
        ttl_seconds: Optional[int] = None,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
        report: bool = False,
    ) -> Union[np.ndarray, Tensor, Result]:
        """a @ b for a (m x k) and b (k x n) of the same dtype; each an array
        or a Tensor. keep=True holds the result on the server and returns a
        Tensor (ttl_seconds: its idle lifetime). Arrays of a shared-memory
        region are read there by the server; out= (an m x n array of a
        region, the result's dtype) receives the result, and is returned.
        float16 and bfloat16 (ml_dtypes.bfloat16) inputs accumulate in float32;
        output_dtype=numpy.float32 returns that unrounded, else the result has
        the inputs' dtype."""
        request = matmul_request(
            a, b, variant, allow_tf32, keep, ttl_seconds, out, self, output_dtype
        )
        return self._compute("MatMul", request, self._route(a, b, out), timeout, report, out)

    def transpose(
        self,
        x,
        *,
        variant: str = "",
        keep: bool = False,
        ttl_seconds: Optional[int] = None,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
        report: bool = False,
    ) -> Union[np.ndarray, Tensor, Result]:
        """x.T; out= as for matmul (cols x rows)."""
        request = transpose_request(x, variant, keep, ttl_seconds, out, self)
        return self._compute("Transpose", request, self._route(x, out), timeout, report, out)

    def reduce(
        self,
        x,
        op: Union[str, int] = "sum",
        axis: Union[str, int, None] = None,
        *,
        variant: str = "",
        output_dtype: Any = None,
        keep: bool = False,
        ttl_seconds: Optional[int] = None,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
        report: bool = False,
    ) -> Union[np.ndarray, Tensor, Result]:
        """op is sum/min/max/mean. axis None or 'all' gives 1 x 1, 1 or 'per_row'
        gives rows x 1, 0 or 'per_column' gives 1 x cols (NumPy's axis numbers).
        output_dtype as for matmul; out= as for matmul, of that shape."""
        request = reduce_request(x, op, axis, variant, keep, ttl_seconds, out, self, output_dtype)
        return self._compute("Reduce", request, self._route(x, out), timeout, report, out)

    def profile(
        self,
        op: str,
        shape: Sequence[int],
        dtype: Any = np.float32,
        *,
        variants: Sequence[str] = (),
        reduce_op: str = "sum",
        axis: Union[str, int, None] = None,
        warmup: int = 0,
        repetitions: int = 0,
        counters: bool = False,
        warm_cache: bool = False,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> ProfileResult:
        """Times every variant (or `variants`) on server-generated data.
        shape: (m, k, n) for matmul (a is m x k, b is k x n), (m, n) otherwise.
        counters: ask for hardware counters; no server reads them yet, and each
        row's "note" says why. The result's `comparisons` pair variants that
        differ by one idea, with the time ratio that idea bought.
        warm_cache: time runs with warm caches; by default each timed run starts
        with the device's last-level cache (a GPU's L2) flushed."""
        request = profile_request(
            op, shape, dtype, variants, reduce_op, axis, warmup, repetitions, counters, warm_cache
        )
        return ProfileResult(self._call("Profile", request, timeout))

    def server_info(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> pb.ServerInfo:
        """Version, backend, devices and the variants of each op (a protobuf message)."""
        return self._call("GetServerInfo", pb.ServerInfoRequest(), timeout)


# Every other unary rpc of the service: generated from its descriptor.
add_generated_methods(Client, asynchronous=False, unset=CLIENT_TIMEOUT)
