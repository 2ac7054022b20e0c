"""The asyncio client against a real server on the CPU backend."""

import asyncio

import grpc
import numpy as np
import pytest

import gpucompute


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("connections", [1, 3])
def test_concurrent_calls(server_target, connections):
    async def main():
        async with gpucompute.aio.Client(server_target, connections=connections) as client:
            xs = [np.arange(i * 7, dtype=np.float32).reshape(i, 7) for i in range(1, 17)]
            outs = await asyncio.gather(*(client.transpose(x) for x in xs))
            for x, t in zip(xs, outs):
                assert np.array_equal(t, x.T)
            c = await client.matmul(np.ones((3, 2)), np.asfortranarray(np.ones((2, 4))))
            assert np.all(c == 2)
            r = await client.reduce(np.arange(6.0).reshape(2, 3), "sum", 1, report=True)
            assert r.output.tolist() == [[3.0], [12.0]]
            assert r.report.variant == "cpu_reference"
            info = await client.server_info()
            assert info.backend == "cpu"
            prof = await client.profile("reduce", (16, 16), np.float64)
            assert prof[0]["ok"]
    run(main())


def test_errors_and_deadline(server_target):
    async def main():
        async with gpucompute.aio.Client(server_target) as client:
            with pytest.raises(gpucompute.ComputeError) as e:
                await client.matmul(np.ones((2, 3)), np.ones((2, 3)))
            assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
            a = np.ones((1024, 1024))
            with pytest.raises(gpucompute.ComputeError) as e:
                await client.matmul(a, a, timeout=0.001)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    run(main())
