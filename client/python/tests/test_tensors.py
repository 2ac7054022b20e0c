"""Tensors held by the server (Upload, Download, keep, ReleaseTensors,
ListTensors) through the blocking client, against a real CPU-backend server."""

import time

import grpc
import numpy as np
import pytest

import gpucompute


@pytest.fixture(scope="module")
def client(server_target):
    with gpucompute.Client(server_target, timeout=60) as c:
        yield c


def uniform(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def assert_released(client, tensor):
    with pytest.raises(gpucompute.ComputeError) as e:
        client.download(tensor)
    assert e.value.code == grpc.StatusCode.NOT_FOUND and tensor.id in e.value.message


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 1), (33, 257), (2, 1)])
def test_round_trip_is_exact(client, rng, dtype, shape):
    x = uniform(rng, shape, dtype)
    with client.upload(x) as t:
        assert isinstance(t, gpucompute.Tensor)
        info = t.info
        assert info.id == t.id and "@" in t.id
        assert (info.dtype, info.shape, info.bytes) == (np.dtype(dtype), shape, x.nbytes)
        assert info.device == "cpu" and info.server and t.id.endswith("@" + info.server)
        assert info.expires is not None
        out = t.download()
        assert out.dtype == dtype and out.shape == shape and out.flags.writeable
        np.testing.assert_array_equal(out, x)
    assert_released(client, t)


def test_one_dimensional_array_is_one_row(client, rng):
    v = uniform(rng, 11, np.float64)
    with client.upload(v) as t:
        assert t.shape == (1, 11)
        np.testing.assert_array_equal(t.download(), v.reshape(1, 11))


def test_any_layout_uploads_row_major(client, rng):
    for x in (
        np.asfortranarray(uniform(rng, (9, 7), np.float64)),
        uniform(rng, (20, 30), np.float32)[::3, ::2],
        uniform(rng, (4, 6), ">f8"),
    ):
        with client.upload(x) as t:
            np.testing.assert_array_equal(t.download(), x)


@pytest.mark.parametrize("chunk", [1, 3, 1000, 7 << 20, 64 << 20])
def test_upload_and_download_chunk_sizes(client, rng, chunk):
    """1-byte and odd chunks on a small matrix; odd and large ones on 24 MiB."""
    shape = (5, 7) if chunk < 1000 else (1531, 2053)  # 24 MiB of float64
    x = uniform(rng, shape, np.float64)
    t = client.upload(x, chunk_bytes=chunk)
    try:
        np.testing.assert_array_equal(t.download(chunk_bytes=min(chunk, 64 << 20)), x)
        np.testing.assert_array_equal(t.download(), x)  # the server's default chunks
    finally:
        assert t.release()
    assert not t.release()  # no longer held: released counts 0


def test_download_into_an_array(client, rng):
    """out= fills a caller's array (the same one each time, no new memory);
    one of another shape, dtype or layout is refused before anything moves."""
    x, y = uniform(rng, (37, 29), np.float32), uniform(rng, (37, 29), np.float32)
    with client.upload(x) as tx, client.upload(y) as ty:
        out = np.empty((37, 29), np.float32)
        assert client.download(tx, out=out, chunk_bytes=1000) is out
        np.testing.assert_array_equal(out, x)
        assert ty.download(out=out) is out
        assert client.download(ty.id, out=out) is out  # by id: checked when the info arrives
        np.testing.assert_array_equal(out, y)
        for bad in (
            np.empty((29, 37), np.float32),
            np.empty((37, 29), np.float64),
            np.empty((37, 58), np.float32)[:, ::2],
        ):
            with pytest.raises(ValueError):
                client.download(tx, out=bad)
        with pytest.raises(ValueError):
            client.download(tx.id, out=np.empty((2, 2), np.float32))
        np.testing.assert_array_equal(client.download(tx), x)  # still held, still right


def test_ops_on_tensors_and_keep(client, rng):
    a, b = uniform(rng, (33, 17), np.float64), uniform(rng, (17, 9), np.float64)
    with client.upload(a) as ta, client.upload(b) as tb:
        # Any operand may be a Tensor, an id string or an array.
        for x, y in [(ta, tb), (a, tb), (ta, b), (ta.id, tb)]:
            np.testing.assert_allclose(client.matmul(x, y), a @ b, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(client.transpose(ta), a.T)
        np.testing.assert_allclose(
            client.reduce(ta, "sum", 0), a.sum(axis=0)[None, :], rtol=1e-12, atol=1e-12
        )
        kept = client.matmul(a, b, keep=True, ttl_seconds=120)  # inline operands, kept output
        assert isinstance(kept, gpucompute.Tensor)
        assert kept.shape == (33, 9) and kept.dtype == np.float64
        assert kept.info.device is None
        info = kept.refresh()
        assert info.device == "cpu" and info.bytes == 33 * 9 * 8
        np.testing.assert_allclose(kept.download(release=True), a @ b, rtol=1e-12, atol=1e-12)
        assert_released(client, kept)


def test_chain_moves_no_matrix_bytes(client, rng):
    a, b = uniform(rng, (40, 24), np.float32), uniform(rng, (24, 31), np.float32)
    ta, tb = client.upload(a), client.upload(b)
    c = client.matmul(ta, tb, keep=True, report=True)
    t = client.transpose(c.output, keep=True, report=True)
    r = client.reduce(t.output, "max", 1, keep=True, report=True)
    for step in (c, t, r):
        assert isinstance(step.output, gpucompute.Tensor)
        assert step.report.upload_us == 0 and step.report.download_us == 0, step.report
    ref = (a.astype(np.float64) @ b.astype(np.float64)).T.max(axis=1)[:, None]
    out = r.output.download()
    assert out.shape == (31, 1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    held = {i.id for i in client.tensors()}
    chain = [ta, tb, c.output, t.output, r.output]
    assert {x.id for x in chain} <= held
    assert client.release(*chain) == 5
    assert not {x.id for x in chain} & {i.id for i in client.tensors()}
    for x in chain:
        assert_released(client, x)
    with pytest.raises(gpucompute.ComputeError) as e:
        client.transpose(ta)
    assert e.value.code == grpc.StatusCode.NOT_FOUND and ta.id in e.value.message


def test_list_tensors(client, rng):
    x = uniform(rng, (6, 10), np.float32)
    with client.upload(x, ttl_seconds=300) as t:
        listed = client.tensors()
        assert isinstance(listed, gpucompute.TensorList)
        mine = [i for i in listed if i.id == t.id]
        assert len(mine) == 1 and mine[0].shape == (6, 10) and mine[0].bytes == 240
        assert mine[0].server == t.server
        assert listed.held_bytes >= 240 and listed.limit_bytes >= listed.held_bytes
    assert t.id not in {i.id for i in client.tensors()}


def test_context_manager_releases_on_error(client):
    with pytest.raises(RuntimeError):
        with client.upload(np.ones((2, 2))) as t:
            raise RuntimeError("boom")
    assert_released(client, t)


def test_errors(client):
    with pytest.raises(gpucompute.ComputeError) as e:
        client.upload(np.ones((0, 4)))  # the server holds no empty tensors
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(gpucompute.ComputeError) as e:
        client.transpose("not-an-id")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    with client.upload(np.ones((2, 3), np.float32)) as t:
        with pytest.raises(gpucompute.ComputeError) as e:
            client.matmul(t, np.ones((2, 3), np.float32))  # 2x3 @ 2x3
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(TypeError, match="release takes"):
        client.release(3)
    with pytest.raises(ValueError, match="keep=True"):
        client.transpose(np.ones((2, 2)), ttl_seconds=4)
    assert client.release("0" * 32 + "@nobody") == 0


def test_replicas_route_calls_to_the_holder(server_target, replica_target, rng):
    a, b = uniform(rng, (8, 5), np.float64), uniform(rng, (5, 6), np.float64)
    with gpucompute.Client([server_target, replica_target], timeout=60) as client:
        ta, tb = client.upload(a), client.upload(b)  # uploads take turns over the targets
        assert ta.server != tb.server and tb.server == "replica-b"
        assert tb.id.endswith("@replica-b")
        for _ in range(3):  # each call goes to the holder, whatever the turn
            np.testing.assert_array_equal(client.transpose(ta), a.T)
            np.testing.assert_array_equal(client.transpose(tb), b.T)
        kept = client.transpose(tb, keep=True)
        assert kept.server == "replica-b"
        np.testing.assert_array_equal(kept.download(), b.T)
        assert {ta.id, tb.id, kept.id} <= {i.id for i in client.tensors()}
        # A fresh client given only an id learns who holds it (GetServerInfo).
        with gpucompute.Client([server_target, replica_target]) as other:
            np.testing.assert_array_equal(other.download(tb.id), b)
        # A client of the other replica alone is told who holds it.
        with gpucompute.Client(server_target) as single:
            with pytest.raises(gpucompute.ComputeError) as e:
                single.download(tb.id)
            assert e.value.code == grpc.StatusCode.NOT_FOUND and "replica-b" in e.value.message
        assert client.release(ta, tb, kept) == 3
        assert not {ta.id, tb.id, kept.id} & {i.id for i in client.tensors()}


def test_balanced_target_sends_tensor_calls_to_the_holder(server_target, third_target, rng):
    """One target balanced round_robin over two servers (as behind a k8s
    headless Service): a call naming a tensor goes to a channel opened to its
    instance, the host:port it names; the rest take turns."""
    balanced = f"ipv4:{server_target},{third_target}"
    x = uniform(rng, (6, 4), np.float64)
    with gpucompute.Client(balanced, lb="round_robin", timeout=60) as client:
        # round_robin picks only among connected addresses: until the second
        # connects (a slow server, a sanitizer build, a busy machine), every
        # call goes to the first. Upload until both hold some, for up to 30 s.
        tensors = []
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            tensors.append(client.upload(x * (len(tensors) + 1)))
            if len(tensors) >= 4 and {t.server for t in tensors} == {server_target, third_target}:
                break
            if len(tensors) >= 4:
                time.sleep(0.05)
        assert {t.server for t in tensors} == {server_target, third_target}
        for _ in range(2):
            for i, t in enumerate(tensors, 1):
                np.testing.assert_array_equal(client.transpose(t), (x * i).T)
                kept = client.reduce(t, "sum", 0, keep=True)
                assert kept.server == t.server
                np.testing.assert_allclose(
                    kept.download(release=True), (x * i).sum(axis=0)[None, :], rtol=1e-12
                )
        assert len(client._targets.channels) == 3  # the target, and one per instance
        assert client.release(*tensors) == len(tensors)


def test_readme_tensor_example(server_target, rng):
    """The README's tensor example, run as written against this server."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme, re.S)[1]
    assert "client.upload(a)" in code
    a, b = uniform(rng, (9, 6), np.float32), uniform(rng, (6, 4), np.float32)
    scope = {"gpucompute": gpucompute, "a": a, "b": b}
    exec(compile(code.replace("localhost:50051", server_target), "README.md", "exec"), scope)
    ref = (a.astype(np.float64) @ b).T.max(axis=1)[:, None]
    np.testing.assert_allclose(scope["r"], ref, rtol=1e-5)
    with gpucompute.Client(server_target) as client:
        assert not {scope[k].id for k in ("ta", "tb", "c", "t")} & {i.id for i in client.tensors()}
