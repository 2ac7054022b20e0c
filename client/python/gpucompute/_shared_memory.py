"""Shared-memory regions: the POSIX shm objects created and released, the
SharedMemoryBase both clients' regions build on, and the region an array
lies in."""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import secrets
import weakref
from typing import Any, Optional, Tuple

import numpy as np

from gpucompute.v1 import compute_pb2 as pb


# Shared memory: POSIX shm objects this process creates and the server maps
# (API Part 2). Views of a region carry, in their chain of bases, the buffer
# object made for them, and that object names the region: an operand found to
# lie in a region travels as a SharedMemorySlice instead of its bytes.

_REGION_ATTR = "_gpucompute_region"


@dataclasses.dataclass(frozen=True)
class SharedMemoryInfo:
    """A shared-memory region registered with a server (ListSharedMemory)."""

    name: str  # the client's name for it, used in requests
    key: str  # shm_open name of the object, e.g. "/gpucompute-1234-9f0c..."
    offset: int  # region start inside the object
    byte_size: int
    pinned: bool  # registered for DMA on the server's devices

    @classmethod
    def from_proto(cls, r: pb.SharedMemoryRegion) -> "SharedMemoryInfo":
        return cls(r.name, r.key, r.offset, r.byte_size, r.pinned)


def _posixshmem():
    try:
        import _posixshmem
    except ImportError:
        raise RuntimeError(
            "shared memory needs POSIX shm_open (CPython's _posixshmem), which " "this Python lacks"
        ) from None
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

    def __init__(
        self,
        client,
        index: int,
        key: str,
        mapping: mmap.mmap,
        info: SharedMemoryInfo,
        unregister_on_gc=None,
    ):
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
            raise ValueError(
                f"{shape} {dtype} at offset {offset} is {size} bytes: past the end "
                f"of region {self.name!r} ({self.nbytes} bytes)"
            )
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
        return (
            f"<{type(self).__name__} {self.name!r} {self.key} {self.info.byte_size} bytes, {state}>"
        )


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
