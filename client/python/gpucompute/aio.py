"""asyncio client for the gpucompute service (grpc.aio), the same methods as
gpucompute.Client as coroutines.

    async with gpucompute.aio.Client("localhost:50051") as client:
        c = await client.matmul(a, b)
"""

from __future__ import annotations

import asyncio
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
    """The asyncio twin of gpucompute.Tensor: `await t.download()`,
    `await t.release()`, `await t.refresh()`, and `async with` releases it."""

    async def download(
        self,
        *,
        release: bool = False,
        chunk_bytes: int = 0,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> np.ndarray:
        return await self._client.download(
            self, release=release, chunk_bytes=chunk_bytes, out=out, timeout=timeout
        )

    async def release(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> bool:
        return await self._client.release(self, timeout=timeout) == 1

    async def refresh(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> TensorInfo:
        self.info = await self._client._tensor_info(self.id, timeout)
        return self.info

    async def __aenter__(self) -> "Tensor":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.release()


class SharedMemoryRegion(SharedMemoryBase):
    """The asyncio twin of gpucompute.SharedMemoryRegion: `await
    region.close()`, and `async with` closes it. ndarray() is the same."""

    async def close(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> None:
        if not self._detach():
            return
        try:
            await self._client._unregister_region(self.name, self._index, timeout)
        finally:
            self._release()

    async def __aenter__(self) -> "SharedMemoryRegion":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


_pending = set()  # unregistrations of regions garbage-collected, until they finish


def _forget(task: asyncio.Task) -> None:
    _pending.discard(task)
    if not task.cancelled():
        task.exception()  # best effort: a failure is not reported


class Client:
    """See gpucompute.Client for the arguments; create it inside a running
    event loop and share it between tasks."""

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
            grpc.aio,
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

    async def close(self) -> None:
        """Closes the shared-memory regions still open, then the channels."""
        for region in list(self._regions):
            try:
                await region.close()
            except ComputeError:
                pass
        for channel in self._targets.all_channels():
            await channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _call(self, method: str, request, timeout, index: int = 0):
        try:
            return await self._targets.channels[index].call(method)(
                request,
                timeout=timeout_or(timeout, self.timeout),
                metadata=self._targets.metadata,
            )
        except grpc.RpcError as e:
            raise error_from_rpc(method, e) from None

    async def _index(self, instance: str) -> int:
        i = self._targets.known(instance)
        if i is None:
            for j in self._targets.unasked():
                try:
                    info = await self._call(
                        "GetServerInfo", pb.ServerInfoRequest(), self.timeout, j
                    )
                except ComputeError:
                    continue
                self._targets.asked.add(j)
                self._targets.learn(info.instance_name, j)
            i = self._targets.known(instance)
        return self._targets.unknown(instance) if i is None else i

    async def _route(self, *operands) -> int:
        ids = [t for t in map(tensor_id, operands) if t is not None]
        if ids:
            return await self._index(instance_of(ids[0]))
        index = region_index(*operands)
        return self._targets.any() if index is None else index

    async def _compute(
        self,
        method: str,
        request: bytes,
        index: int,
        timeout,
        report: bool,
        out: Optional[np.ndarray] = None,
    ):
        def make(info: TensorInfo) -> Tensor:
            self._targets.learn(info.server, index)
            return Tensor(self, info)

        response = await self._call(method, request, timeout, index)
        return result(method, response, report, make, out)

    async def shared_memory(
        self, nbytes: int, *, name: Optional[str] = None, timeout: Optional[float] = CLIENT_TIMEOUT
    ) -> SharedMemoryRegion:
        """See gpucompute.Client.shared_memory: `async with await
        client.shared_memory(n) as region:`. A region garbage-collected
        without close() is unlinked, and unregistered by a task on the loop
        that made it while that loop runs."""
        nbytes, name = shared_memory_request(nbytes, name)
        key, mapping = create_shm_object(nbytes)
        name = region_name(key, name)
        try:
            answer = await self._call(
                "RegisterSharedMemory",
                pb.RegisterSharedMemoryRequest(name=name, key=key, byte_size=nbytes),
                timeout,
                0,
            )
        except BaseException:
            release_shm_object(key, mapping)
            raise
        client, loop = weakref.ref(self), asyncio.get_running_loop()

        def spawn():
            if client() is not None:
                task = loop.create_task(
                    client()._call(
                        "UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(name=name), 5.0
                    )
                )
                _pending.add(task)
                task.add_done_callback(_forget)

        def unregister_on_gc():
            if not loop.is_closed():
                loop.call_soon_threadsafe(spawn)

        region = SharedMemoryRegion(
            self, 0, key, mapping, SharedMemoryInfo.from_proto(answer), unregister_on_gc
        )
        self._regions.add(region)
        return region

    async def _unregister_region(self, name: str, index: int, timeout) -> None:
        try:
            await self._call(
                "UnregisterSharedMemory",
                pb.UnregisterSharedMemoryRequest(name=name),
                timeout,
                index,
            )
        except ComputeError as e:
            if e.code != grpc.StatusCode.NOT_FOUND:
                raise

    async def list_shared_memory(
        self, *, timeout: Optional[float] = CLIENT_TIMEOUT
    ) -> List[SharedMemoryInfo]:
        r = await self._call("ListSharedMemory", pb.ListSharedMemoryRequest(), timeout, 0)
        return [SharedMemoryInfo.from_proto(x) for x in r.regions]

    async def unregister_shared_memory(
        self, name: str = "", *, timeout: Optional[float] = CLIENT_TIMEOUT
    ) -> int:
        r = await self._call(
            "UnregisterSharedMemory", pb.UnregisterSharedMemoryRequest(name=name), timeout, 0
        )
        return r.unregistered

    async def upload(
        self,
        array,
        ttl_seconds: Optional[int] = None,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> Tensor:
        messages = upload_messages(array, ttl_seconds, chunk_bytes, self)
        index = await self._route(array)
        info = TensorInfo.from_proto(await self._call("Upload", messages, timeout, index))
        self._targets.learn(info.server, index)
        return Tensor(self, info)

    async def download(
        self,
        tensor,
        *,
        release: bool = False,
        chunk_bytes: int = 0,
        out: Optional[np.ndarray] = None,
        timeout: Optional[float] = CLIENT_TIMEOUT,
    ) -> np.ndarray:
        request = download_request(tensor, chunk_bytes, release, out, self)
        tid = request.tensor_id
        index = await self._index(instance_of(tid))
        out = Download(out, request.HasField("shared_memory"))
        try:
            async for raw in self._targets.channels[index].call("Download")(
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

    async def release(self, *tensors, timeout: Optional[float] = CLIENT_TIMEOUT) -> int:
        groups = defaultdict(list)
        for t in tensors:
            tid = tensor_id(t)
            if tid is None:
                raise TypeError(f"release takes Tensors or tensor ids, not {type(t).__name__}")
            groups[await self._index(instance_of(tid))].append(tid)
        released = 0
        for index, ids in groups.items():
            r = await self._call(
                "ReleaseTensors", pb.ReleaseTensorsRequest(tensor_ids=ids), timeout, index
            )
            released += r.released
        return released

    async def tensors(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> TensorList:
        out = TensorList()
        for index in range(self._targets.base):
            r = await self._call("ListTensors", pb.ListTensorsRequest(), timeout, index)
            out.extend(TensorInfo.from_proto(t) for t in r.tensors)
            out.held_bytes += r.held_bytes
            out.limit_bytes += r.limit_bytes
            for t in r.tensors:
                self._targets.learn(t.server, index)
        return out

    async def _tensor_info(self, tid: str, timeout) -> TensorInfo:
        index = await self._index(instance_of(tid))
        r = await self._call("ListTensors", pb.ListTensorsRequest(), timeout, index)
        for t in r.tensors:
            if t.id == tid:
                return TensorInfo.from_proto(t)
        raise ComputeError(
            "ListTensors",
            grpc.StatusCode.NOT_FOUND,
            f"tensor {tid} is not held: released or expired",
        )

    async def matmul(
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
        request = matmul_request(
            a, b, variant, allow_tf32, keep, ttl_seconds, out, self, output_dtype
        )
        return await self._compute(
            "MatMul", request, await self._route(a, b, out), timeout, report, out
        )

    async def transpose(
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
        request = transpose_request(x, variant, keep, ttl_seconds, out, self)
        return await self._compute(
            "Transpose", request, await self._route(x, out), timeout, report, out
        )

    async def reduce(
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
        request = reduce_request(x, op, axis, variant, keep, ttl_seconds, out, self, output_dtype)
        return await self._compute(
            "Reduce", request, await self._route(x, out), timeout, report, out
        )

    async def profile(
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
        request = profile_request(
            op, shape, dtype, variants, reduce_op, axis, warmup, repetitions, counters, warm_cache
        )
        return ProfileResult(await self._call("Profile", request, timeout))

    async def server_info(self, *, timeout: Optional[float] = CLIENT_TIMEOUT) -> pb.ServerInfo:
        return await self._call("GetServerInfo", pb.ServerInfoRequest(), timeout)


# Every other unary rpc of the service: generated from its descriptor.
add_generated_methods(Client, asynchronous=True, unset=CLIENT_TIMEOUT)
