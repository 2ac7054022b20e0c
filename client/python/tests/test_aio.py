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


def test_tensors(server_target, replica_target):
    """The asyncio twins: upload, ops on tensors with keep, a chain moving no
    matrix bytes, download, ListTensors, release, async with, replicas."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((19, 11)), rng.standard_normal((11, 5))

    async def main():
        async with gpucompute.aio.Client(server_target) as client:
            ta, tb = await asyncio.gather(
                client.upload(a, chunk_bytes=100), client.upload(b, ttl_seconds=60)
            )
            assert isinstance(ta, gpucompute.aio.Tensor) and ta.shape == (19, 11)
            np.testing.assert_array_equal(await ta.download(chunk_bytes=33), a)
            c = await client.matmul(ta, tb, keep=True, report=True)
            t = await client.transpose(c.output, keep=True, report=True)
            r = await client.reduce(t.output, "sum", 0, keep=True, report=True)
            for step in (c, t, r):
                assert isinstance(step.output, gpucompute.aio.Tensor)
                assert step.report.upload_us == 0 and step.report.download_us == 0
            info = await r.output.refresh()
            assert info.device == "cpu" and info.shape == (1, 19)
            np.testing.assert_allclose(
                await r.output.download(), (a @ b).T.sum(axis=0)[None, :], rtol=1e-12, atol=1e-12
            )
            np.testing.assert_array_equal(await client.transpose(ta), a.T)
            chain = [ta, tb, c.output, t.output, r.output]
            assert {x.id for x in chain} <= {i.id for i in await client.tensors()}
            assert await client.release(*chain) == 5
            for x in chain:
                with pytest.raises(gpucompute.ComputeError) as e:
                    await x.download()
                assert e.value.code == grpc.StatusCode.NOT_FOUND
            async with await client.upload(np.ones((2, 2), np.float32)) as held:
                assert held.id in {i.id for i in await client.tensors()}
            assert held.id not in {i.id for i in await client.tensors()}
            assert not await held.release()

        async with gpucompute.aio.Client([server_target, replica_target]) as client:
            t1, t2 = await client.upload(a), await client.upload(b)
            assert t1.server != t2.server and "replica-b" in (t1.server, t2.server)
            outs = await asyncio.gather(*(client.transpose(t) for t in (t1, t2, t1, t2)))
            for t, x in zip(outs, (a, b, a, b)):
                np.testing.assert_array_equal(t, x.T)
            assert await client.release(t1.id, t2) == 2

    run(main())
