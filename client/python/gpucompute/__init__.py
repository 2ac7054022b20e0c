"""Python client for gpucompute: GPU MatMul, Transpose, Reduce and Profile on
NumPy arrays over gRPC.

    import numpy as np, gpucompute
    with gpucompute.Client("localhost:50051") as client:
        c = client.matmul(np.ones((64, 32), np.float32), np.ones((32, 16), np.float32))

Matrices can stay on the server: t = client.upload(a) returns a Tensor that
ops take in place of an array, and keep=True returns a result as a Tensor.
On the server's host, client.shared_memory(nbytes) returns a region whose
ndarray() views ops read in place and out= receives results in.
gpucompute.aio.Client is the asyncio twin of gpucompute.Client.
"""

from gpucompute._errors import ComputeError
from gpucompute._profile_result import ProfileResult
from gpucompute._results import Report, Result
from gpucompute._shared_memory import SharedMemoryInfo
from gpucompute._tensors import TensorInfo, TensorList
from gpucompute.client import Client, SharedMemoryRegion, Tensor
from gpucompute import aio

__all__ = [
    "Client",
    "ComputeError",
    "ProfileResult",
    "Report",
    "Result",
    "SharedMemoryInfo",
    "SharedMemoryRegion",
    "Tensor",
    "TensorInfo",
    "TensorList",
    "aio",
]
__version__ = "0.1.0"
