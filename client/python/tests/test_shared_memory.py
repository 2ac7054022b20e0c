"""Shared memory (API Part 2): regions this process creates, views of them
as operands and as out=, written as protobuf writes the messages; then
against a real CPU-backend server run with --allow_shared_memory, and one
without it."""

import asyncio
import gc
import os
import re
from pathlib import Path

import grpc
import numpy as np
import pytest

import gpucompute
from gpucompute import _errors, _operands, _requests, _results, _shared_memory
from gpucompute.v1 import compute_pb2 as pb

F32, F64 = pb.DTYPE_FLOAT32, pb.DTYPE_FLOAT64


def shm_exists(key):
    """Whether the shm object `key` exists (Linux lists them in /dev/shm)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm to look for shm objects in")
    return os.path.exists("/dev/shm" + key)


def uniform(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def proto_matrix(array):
    dtype, a = _operands.row_major(array, "x")
    return pb.Matrix(dtype=dtype, rows=a.shape[0], cols=a.shape[1], data=a.tobytes())


def shm_matrix(dtype, rows, cols, region, offset, byte_size):
    return pb.Matrix(
        dtype=dtype,
        rows=rows,
        cols=cols,
        shared_memory=pb.SharedMemorySlice(region=region, offset=offset, byte_size=byte_size),
    )


# Without a server: regions made here, requests compared with protobuf's.


@pytest.fixture
def region():
    """A region as a client makes it, registered nowhere, named "r"."""
    key, mapping = _shared_memory.create_shm_object(1 << 16)
    info = _shared_memory.SharedMemoryInfo("r", key, 0, 1 << 16, False)
    r = _shared_memory.SharedMemoryBase(None, 0, key, mapping, info)
    yield r
    r._finalizer()


def test_views_travel_as_slices(region, rng):
    a = region.ndarray((3, 4), np.float32, offset=64)
    b = uniform(rng, (4, 5), np.float32)
    a[:] = uniform(rng, (3, 4), np.float32)
    assert (
        _requests.matmul_request(a, b, "", False)
        == pb.MatMulRequest(
            a=shm_matrix(F32, 3, 4, "r", 64, 48), b=proto_matrix(b)
        ).SerializeToString()
    )
    # Offset 0 is left out, as proto3 does; a 1-D view is one row.
    x = region.ndarray(7, np.float64)
    assert (
        _requests.transpose_request(x, "")
        == pb.TransposeRequest(input=shm_matrix(F64, 1, 7, "r", 0, 56)).SerializeToString()
    )
    # A block of rows of a view is C-contiguous: its own slice of the region.
    big = region.ndarray((10, 6), np.float64, offset=1024)
    assert (
        _requests.reduce_request(big[2:5], "max", 0, "")
        == pb.ReduceRequest(
            input=shm_matrix(F64, 3, 6, "r", 1024 + 2 * 48, 144),
            op=pb.REDUCE_OP_MAX,
            axis=pb.REDUCE_AXIS_PER_COLUMN,
        ).SerializeToString()
    )


def test_views_not_row_major_go_inline(region, rng):
    """Transposed, strided, big-endian, other dtypes or empty: sent as bytes."""
    v = region.ndarray((6, 4), np.float64)
    v[:] = uniform(rng, (6, 4), np.float64)
    be = region.ndarray((2, 3), ">f4", offset=512)
    be[:] = uniform(rng, (2, 3), np.float32)
    for x in (v.T, v[:, ::2], be, region.ndarray((0, 3), np.float32)):
        assert (
            _requests.transpose_request(x, "")
            == pb.TransposeRequest(input=proto_matrix(x)).SerializeToString()
        )
    with pytest.raises(TypeError, match="float32"):
        _requests.transpose_request(region.ndarray((2, 2), np.int32), "")


def test_out_places_the_result_in_the_region(region, rng):
    x = uniform(rng, (5, 3), np.float32)
    out = region.ndarray((3, 5), np.float32, offset=256)
    assert (
        _requests.transpose_request(x, "", out=out)
        == pb.TransposeRequest(
            input=proto_matrix(x),
            output=pb.OutputPlacement(
                shared_memory=pb.SharedMemorySlice(region="r", offset=256, byte_size=60)
            ),
        ).SerializeToString()
    )
    col = region.ndarray(3, np.float32, offset=8)  # 1-D: 1 x 3, reduce per column
    assert (
        _requests.reduce_request(x, "sum", 0, "", out=col)
        == pb.ReduceRequest(
            input=proto_matrix(x),
            axis=pb.REDUCE_AXIS_PER_COLUMN,
            output=pb.OutputPlacement(
                shared_memory=pb.SharedMemorySlice(region="r", offset=8, byte_size=12)
            ),
        ).SerializeToString()
    )
    b = region.ndarray((3, 2), np.float32, offset=4096)
    out = region.ndarray((5, 2), np.float32)
    assert (
        _requests.matmul_request(x, b, "", True, out=out)
        == pb.MatMulRequest(
            a=proto_matrix(x),
            b=shm_matrix(F32, 3, 2, "r", 4096, 24),
            allow_tf32=True,
            output=pb.OutputPlacement(shared_memory=pb.SharedMemorySlice(region="r", byte_size=40)),
        ).SerializeToString()
    )


def test_upload_and_download_name_the_slice(region, rng):
    x = region.ndarray((9, 11), np.float64, offset=800)
    x[:] = uniform(rng, (9, 11), np.float64)
    assert list(_requests.upload_messages(x, 30, 1)) == [
        pb.UploadRequest(
            dtype=F64,
            rows=9,
            cols=11,
            ttl_seconds=30,
            shared_memory=pb.SharedMemorySlice(region="r", offset=800, byte_size=792),
        ).SerializeToString()
    ]
    out = region.ndarray((9, 11), np.float64, offset=8000)
    assert _requests.download_request("id@h", 0, True, out, None) == pb.DownloadRequest(
        tensor_id="id@h",
        release=True,
        shared_memory=pb.SharedMemorySlice(region="r", offset=8000, byte_size=792),
    )


def test_out_is_checked_before_any_call(region):
    x = np.ones((4, 6), np.float32)
    good = region.ndarray((6, 4), np.float32)
    bad = [
        (np.empty((6, 4), np.float32), "not a view of a shared-memory region"),
        (region.ndarray((4, 6), np.float32), r"shape 6 x 4, out has \(4, 6\)"),
        (region.ndarray((6, 4), np.float64), "dtype float32, out has float64"),
        (region.ndarray(24, np.float32), r"out has \(24,\) \(1-D is 1 x N\)"),
        (region.ndarray((4, 6), np.float32).T, "not C-contiguous"),
        ([[0.0] * 4] * 6, "expected an array"),
    ]
    for out, why in bad:
        with pytest.raises((ValueError, TypeError), match=why):
            _requests.transpose_request(x, "", out=out)
    with pytest.raises(ValueError, match="keep=True"):
        _requests.transpose_request(x, "", keep=True, out=good)
    with pytest.raises(ValueError, match="ttl_seconds"):
        _requests.transpose_request(x, "", ttl_seconds=3, out=good)
    with pytest.raises(ValueError, match=r"shape 4 x 1"):
        _requests.reduce_request(x, "sum", 1, "", out=region.ndarray(4, np.float32))
    with pytest.raises(ValueError, match=r"shape 4 x 5"):
        _requests.matmul_request(x, np.ones((6, 5), np.float32), "", False, out=good)
    # A tensor named by its id: the client cannot tell; the server checks the byte size.
    _requests.transpose_request("0" * 32 + "@h", "", out=good)


def test_views_of_another_clients_region(region, rng):
    """A region belongs to the client that registered it: another client
    sends such an operand inline, and refuses it as out."""
    x = region.ndarray((2, 3), np.float64)
    x[:] = uniform(rng, (2, 3), np.float64)
    other = object()
    assert (
        _requests.transpose_request(x, "", owner=other)
        == pb.TransposeRequest(input=proto_matrix(x)).SerializeToString()
    )
    with pytest.raises(ValueError, match="another client"):
        _requests.transpose_request(np.ones((3, 2)), "", out=x, owner=other)


def test_responses_in_shared_memory(region):
    out = region.ndarray((2, 3), np.float64)
    out[:] = 7
    slice_ = pb.SharedMemorySlice(region="r", byte_size=48)
    raw = pb.TransposeResponse(
        output=pb.Matrix(dtype=F64, rows=2, cols=3, shared_memory=slice_),
        report=pb.ExecutionReport(variant="v"),
    ).SerializeToString()
    assert _results.result("Transpose", raw, False, out=out) is out
    r = _results.result("Transpose", raw, True, out=out)
    assert r.output is out and r.report.variant == "v"
    assert (out == 7).all()  # the server wrote it; the client copies nothing
    with pytest.raises(_errors.ComputeError, match="in shared memory"):
        _results.result("Transpose", raw, False)  # no out= asked for it
    with pytest.raises(ValueError, match=r"written to out has shape 3 x 2"):
        _results.result(
            "Transpose",
            pb.TransposeResponse(
                output=pb.Matrix(dtype=F64, rows=3, cols=2, shared_memory=slice_)
            ).SerializeToString(),
            False,
            out=out,
        )
    # A server that answers inline after all: the bytes are copied into out.
    inline = pb.TransposeResponse(output=proto_matrix(np.arange(6.0).reshape(2, 3)))
    assert _results.result("Transpose", inline.SerializeToString(), False, out=out) is out
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3))


def test_ndarray_bounds_and_release(region):
    with pytest.raises(ValueError, match="past the end"):
        region.ndarray((1, 1), np.float32, offset=region.nbytes - 3)
    with pytest.raises(ValueError, match="negative"):
        region.ndarray(-1, np.float32)
    with pytest.raises(ValueError, match="past the end"):
        region.ndarray(4, np.float32, offset=-4)
    last = region.ndarray(4, np.float32, offset=region.nbytes - 16)
    last[:] = [1, 2, 3, 4]
    assert shm_exists(region.key)
    region._finalizer()  # as on garbage collection
    assert not shm_exists(region.key)
    assert last.tolist() == [1, 2, 3, 4]  # views keep the mapping until they go


def test_a_view_keeps_its_region(rng):
    """Dropping the region but keeping a view: the region stays open."""
    key, mapping = _shared_memory.create_shm_object(4096)
    info = _shared_memory.SharedMemoryInfo("k", key, 0, 4096, False)
    r = _shared_memory.SharedMemoryBase(None, 0, key, mapping, info)
    v = r.ndarray((4, 4))[1:3]
    del r
    gc.collect()
    assert shm_exists(key) and _shared_memory.region_of(v).name == "k"
    del v
    gc.collect()
    assert not shm_exists(key)


# Against servers.


@pytest.fixture(scope="module")
def client(shm_target):
    with gpucompute.Client(shm_target, timeout=60) as cl:
        yield cl


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ops_read_and_write_shared_memory(client, rng, dtype):
    m, k, n = 37, 23, 19
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    size = np.dtype(dtype).itemsize
    with client.shared_memory(4 << 20) as region:
        assert region.nbytes == 4 << 20 and region.key.startswith("/gpucompute-")
        # Matrices at offsets inside the region, some not a multiple of 64.
        a = region.ndarray((m, k), dtype, offset=8 * size)
        b = region.ndarray((k, n), dtype, offset=8 * size + a.nbytes)
        a[:], b[:] = uniform(rng, (m, k), dtype), uniform(rng, (k, n), dtype)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        out = region.ndarray((m, n), dtype, offset=100_000)
        assert client.matmul(a, b, out=out) is out
        np.testing.assert_allclose(out, ref, **tol)
        # Operands in shared memory, the result inline; and mixed with inline bytes.
        np.testing.assert_allclose(client.matmul(a, b), ref, **tol)
        np.testing.assert_allclose(client.matmul(a, b.copy()), ref, **tol)
        t = region.ndarray((k, m), dtype, offset=200_000)
        r = client.transpose(a, out=t, report=True)
        assert r.output is t and r.report.device == "cpu"
        np.testing.assert_array_equal(t, a.T)
        np.testing.assert_array_equal(client.transpose(a[10:20]), a[10:20].T)  # a row block
        for op, axis, shape in [
            ("sum", None, (1, 1)),
            ("max", 1, (m, 1)),
            ("mean", 0, (1, k)),
            ("min", 0, (k,)),
        ]:
            o = region.ndarray(shape, dtype, offset=300_000 + 1000 * size)
            assert client.reduce(a, op, axis, out=o) is o
            want = getattr(np, op)(a.astype(np.float64), axis=axis).reshape(shape)
            np.testing.assert_allclose(o, want, **tol)
        # A larger one, most of the region.
        big = region.ndarray((300, 200), dtype, offset=400_000)
        big[:] = uniform(rng, (300, 200), dtype)
        bt = region.ndarray((200, 300), dtype, offset=400_000 + big.nbytes)
        assert client.transpose(big, out=bt) is bt
        np.testing.assert_array_equal(bt, big.T)


def test_upload_and_download_through_shared_memory(client, rng):
    with client.shared_memory(64 << 10) as region:
        x = region.ndarray((31, 17), np.float64, offset=40)
        x[:] = uniform(rng, (31, 17), np.float64)
        with client.upload(x) as t:
            assert t.shape == (31, 17) and t.dtype == np.float64
            np.testing.assert_array_equal(t.download(), x)
            out = region.ndarray((31, 17), np.float64, offset=8192)
            assert t.download(out=out) is out
            np.testing.assert_array_equal(out, x)
            out2 = region.ndarray((31, 17), np.float64, offset=16384)
            assert client.download(t.id, out=out2) is out2  # by id: shape unknown to the client
            np.testing.assert_array_equal(out2, x)
            kept = client.matmul(t, x.T.copy(), keep=True)
            prod = region.ndarray((31, 31), np.float64, offset=32768)
            assert kept.download(out=prod, release=True) is prod
            np.testing.assert_allclose(prod, x @ x.T, rtol=1e-12, atol=1e-12)
            with pytest.raises(ValueError, match="shape 31 x 17"):
                t.download(out=region.ndarray((17, 31), np.float64))


def test_list_shared_memory_and_names(client):
    with client.shared_memory(4096, name="pyshm-named") as r1, client.shared_memory(12345) as r2:
        assert r1.name == "pyshm-named" and r2.name != r1.name
        listed = {i.name: i for i in client.list_shared_memory()}
        assert isinstance(listed["pyshm-named"], gpucompute.SharedMemoryInfo)
        assert (listed["pyshm-named"].key, listed["pyshm-named"].byte_size) == (r1.key, 4096)
        assert listed[r2.name] == r2.info and r2.info.byte_size == 12345
        assert isinstance(r2.pinned, bool) and r2.pinned == listed[r2.name].pinned
        with pytest.raises(gpucompute.ComputeError) as e:
            client.shared_memory(64, name="pyshm-named")
        assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
    names = {i.name for i in client.list_shared_memory()}
    assert not {"pyshm-named", r2.name} & names
    assert not shm_exists(r1.key) and not shm_exists(r2.key)
    assert not mine_in_dev_shm()


def test_slice_past_the_end_is_invalid_argument(client):
    with client.shared_memory(4096) as region:
        size = 4 * 4 * 8
        for offset, why in [(4096 - size + 1, "one byte past the end"), (-8, "negative")]:
            request = pb.TransposeRequest(input=shm_matrix(F64, 4, 4, region.name, offset, size))
            with pytest.raises(gpucompute.ComputeError) as e:
                client._call("Transpose", request.SerializeToString(), 30)
            assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, why
        request = pb.TransposeRequest(
            input=proto_matrix(np.ones((4, 4))),
            output=pb.OutputPlacement(
                shared_memory=pb.SharedMemorySlice(
                    region=region.name, offset=4096 - size + 1, byte_size=size
                )
            ),
        )
        with pytest.raises(gpucompute.ComputeError) as e:
            client._call("Transpose", request.SerializeToString(), 30)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        # byte_size not rows*cols*size
        request = pb.TransposeRequest(input=shm_matrix(F64, 4, 4, region.name, 0, size - 8))
        with pytest.raises(gpucompute.ComputeError) as e:
            client._call("Transpose", request.SerializeToString(), 30)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        # keep and shared_memory in one placement
        out = region.ndarray((4, 4), np.float64)
        request = pb.TransposeRequest(
            input=proto_matrix(np.ones((4, 4))),
            output=pb.OutputPlacement(
                keep=True, shared_memory=pb.SharedMemorySlice(region=region.name, byte_size=size)
            ),
        )
        with pytest.raises(gpucompute.ComputeError) as e:
            client._call("Transpose", request.SerializeToString(), 30)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(ValueError, match="keep=True"):
            client.transpose(np.ones((4, 4)), keep=True, out=out)


def test_unknown_region_is_not_found(client, rng):
    region = client.shared_memory(4096)
    x = region.ndarray((3, 5), np.float32)
    x[:] = uniform(rng, (3, 5), np.float32)
    assert client.unregister_shared_memory(region.name) == 1  # behind the region's back
    with pytest.raises(gpucompute.ComputeError) as e:
        client.transpose(x)
    assert e.value.code == grpc.StatusCode.NOT_FOUND and region.name in e.value.message
    with pytest.raises(gpucompute.ComputeError) as e:
        client.transpose(np.ones((5, 3), np.float32), out=x)
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    region.close()  # the server no longer knows it: still closes
    assert region.closed and not shm_exists(region.key)
    region.close()  # again: nothing
    # A view of a closed region is sent inline; it stays readable.
    np.testing.assert_array_equal(client.transpose(x), x.T)
    with pytest.raises(ValueError, match="closed"):
        client.transpose(np.ones((5, 3), np.float32), out=x)
    with pytest.raises(ValueError, match="closed"):
        region.ndarray(4)


def test_missing_object_is_not_found(client):
    request = pb.RegisterSharedMemoryRequest(
        name="pyshm-missing", key="/gpucompute-no-such-object", byte_size=4096
    )
    with pytest.raises(gpucompute.ComputeError) as e:
        client._call("RegisterSharedMemory", request, 30)
    assert (
        e.value.code == grpc.StatusCode.NOT_FOUND
        and "/gpucompute-no-such-object" in e.value.message
    )


def test_garbage_collected_region_is_unregistered_and_unlinked(client):
    region = client.shared_memory(4096)
    name, key = region.name, region.key
    del region
    gc.collect()
    assert not shm_exists(key)
    assert name not in {i.name for i in client.list_shared_memory()}


def test_closing_the_client_closes_its_regions(shm_target):
    with gpucompute.Client(shm_target) as cl:
        region = cl.shared_memory(4096)
        view = region.ndarray(8)
    assert region.closed and not shm_exists(region.key)
    with gpucompute.Client(shm_target) as other:
        assert region.name not in {i.name for i in other.list_shared_memory()}
    view[:] = 1  # still mapped while the view lives


def mine_in_dev_shm():
    """This process's shm objects (Linux lists them in /dev/shm)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {p for p in os.listdir("/dev/shm") if p.startswith(f"gpucompute-{os.getpid()}-")}


def test_server_without_the_flag_refuses(server_target):
    before = mine_in_dev_shm()
    with gpucompute.Client(server_target, timeout=30) as cl:
        with pytest.raises(gpucompute.ComputeError) as e:
            cl.shared_memory(4096)
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "--allow_shared_memory" in e.value.message
        for call in (cl.list_shared_memory, cl.unregister_shared_memory):
            with pytest.raises(gpucompute.ComputeError) as e:
                call()
            assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        request = pb.TransposeRequest(input=shm_matrix(F32, 1, 1, "r", 0, 4))
        with pytest.raises(gpucompute.ComputeError) as e:
            cl._call("Transpose", request.SerializeToString(), 30)
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert mine_in_dev_shm() <= before  # the object made for the refused region is gone


def test_asyncio_twin(shm_target, rng):
    a, b = uniform(rng, (37, 23), np.float64), uniform(rng, (23, 29), np.float64)

    async def main():
        async with gpucompute.aio.Client(shm_target, timeout=60) as client:
            async with await client.shared_memory(1 << 16) as region:
                assert isinstance(region, gpucompute.aio.SharedMemoryRegion)
                va = region.ndarray(a.shape, np.float64)
                vb = region.ndarray(b.shape, np.float64, offset=va.nbytes)
                va[:], vb[:] = a, b
                out = region.ndarray((37, 29), np.float64, offset=va.nbytes + vb.nbytes)
                outs = await asyncio.gather(
                    client.matmul(va, vb, out=out),
                    client.transpose(va),
                    client.reduce(vb, "sum", 1),
                )
                assert outs[0] is out
                np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
                np.testing.assert_array_equal(outs[1], a.T)
                np.testing.assert_allclose(outs[2], b.sum(axis=1)[:, None], rtol=1e-12)
                t = await client.upload(vb)
                back = region.ndarray(b.shape, np.float64, offset=40_000)
                assert await t.download(out=back, release=True) is back
                np.testing.assert_array_equal(back, b)
                r = region.ndarray((29, 37), np.float64, offset=48_000)
                await client.transpose(out, out=r)
                np.testing.assert_allclose(r, (a @ b).T, rtol=1e-12, atol=1e-12)
                assert region.name in {i.name for i in await client.list_shared_memory()}
            assert region.closed and not shm_exists(region.key)
            assert region.name not in {i.name for i in await client.list_shared_memory()}
            gone = await client.shared_memory(4096)
            name = gone.name
            del gone
            gc.collect()
            for _ in range(100):  # unregistered by a task on this loop
                if name not in {i.name for i in await client.list_shared_memory()}:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"{name} still registered")

    asyncio.run(main())


def test_readme_shared_memory_example(shm_target):
    """The README's shared-memory example, run as written against this server."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "shared_memory(" in b][0]
    scope = {"gpucompute": gpucompute, "np": np}
    exec(compile(code.replace("localhost:50051", shm_target), "README.md", "exec"), scope)
    assert scope["region"].closed
