"""The blocking client against a real server on the CPU backend."""

import concurrent.futures
import json
import re
from pathlib import Path

import grpc
import numpy as np
import pytest

import gpucompute
from gpucompute import _channels


@pytest.fixture(scope="module")
def client(server_target):
    with gpucompute.Client(server_target, timeout=60) as c:
        yield c


def uniform(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-12)])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (33, 17, 5), (128, 64, 96)])
def test_matmul_matches_numpy(client, rng, dtype, tol, m, k, n):
    a, b = uniform(rng, (m, k), dtype), uniform(rng, (k, n), dtype)
    c = client.matmul(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert c.dtype == dtype and c.shape == (m, n)
    assert np.max(np.abs(c - ref)) <= tol * max(1.0, np.max(np.abs(ref)))


def test_any_layout_is_sent_row_major(client, rng):
    base = uniform(rng, (40, 30), np.float64)
    layouts = {
        "fortran": np.asfortranarray(base),
        "strided": uniform(rng, (80, 90), np.float64)[::2, ::3],
        "big_endian": base.astype(">f8"),
        "transposed_view": uniform(rng, (30, 40), np.float64).T,
    }
    for name, x in layouts.items():
        assert np.array_equal(client.transpose(x), np.asarray(x).T), name
        assert np.array_equal(client.matmul(x, np.eye(x.shape[1])), x), name


@pytest.mark.parametrize("shape", [(1, 1), (1, 257), (33, 17), (1000, 1001)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transpose_is_exact(client, rng, shape, dtype):
    x = uniform(rng, shape, dtype)
    t = client.transpose(x)
    assert t.dtype == dtype and np.array_equal(t, x.T)


def test_large_payload(client, rng):
    x = uniform(rng, (2048, 2048), np.float32)  # 16 MiB each way, past gRPC's 4 MiB default
    assert np.array_equal(client.transpose(x), x.T)


@pytest.mark.parametrize("op", ["sum", "min", "max", "mean"])
def test_reduce_matches_numpy(client, rng, op):
    x = uniform(rng, (37, 53), np.float64)
    ref = getattr(np, op)
    tol = 1e-12 * np.abs(x).sum()
    for axis, expected in [
        (None, ref(x).reshape(1, 1)),
        ("all", ref(x).reshape(1, 1)),
        (1, ref(x, axis=1)[:, None]),
        ("per_row", ref(x, axis=1)[:, None]),
        (0, ref(x, axis=0)[None, :]),
        ("per_column", ref(x, axis=0)[None, :]),
    ]:
        out = client.reduce(x, op, axis)
        assert out.shape == expected.shape, (op, axis)
        assert np.max(np.abs(out - expected)) <= tol, (op, axis)


def test_one_dimensional_arrays_are_one_row(client, rng):
    """A 1-D array is sent as 1 x N, as the CLI reads a 1-D .npy file; results
    are always 2-D."""
    v = uniform(rng, 7, np.float64)
    np.testing.assert_array_equal(client.transpose(v), v.reshape(7, 1))
    b = uniform(rng, (7, 3), np.float64)
    c = client.matmul(v, b)
    assert c.shape == (1, 3)
    np.testing.assert_allclose(c[0], v @ b, rtol=1e-12, atol=1e-12)
    assert client.reduce(v, "sum", "per_column").shape == (1, 7)
    assert client.reduce(v, "max", "per_row")[0, 0] == v.max()


def test_results_are_read_only_views(client):
    out = client.transpose(np.ones((3, 2), np.float32))
    assert not out.flags.writeable
    writable = out.copy()
    writable += 1
    assert np.all(writable == 2)


def test_report(client):
    r = client.matmul(np.ones((8, 4)), np.ones((4, 2)), variant="cpu_reference", report=True)
    assert isinstance(r, gpucompute.Result)
    assert np.all(r.output == 4)
    assert r.report.variant == "cpu_reference" and r.report.device == "cpu"
    assert r.report.total_us >= r.report.compute_us >= 0
    assert r.report.batch_size == 1  # one request, nothing waiting: it ran alone


def test_server_errors_carry_code_and_message(client):
    with pytest.raises(gpucompute.ComputeError) as e:
        client.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "3" in e.value.message and "4" in e.value.message
    assert str(e.value).startswith("MatMul failed: INVALID_ARGUMENT: ")

    with pytest.raises(gpucompute.ComputeError) as e:
        client.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float64))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT

    with pytest.raises(gpucompute.ComputeError) as e:
        client.transpose(np.ones((2, 2)), variant="no_such_variant")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "no_such_variant" in e.value.message


def test_client_side_argument_errors(client):
    with pytest.raises(TypeError, match="astype"):
        client.transpose(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match="2-D"):
        client.transpose(np.ones((2, 2, 2), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        client.transpose(np.float32(1))
    with pytest.raises(ValueError, match="axis"):
        client.reduce(np.ones((2, 2)), "sum", axis=2)
    with pytest.raises(ValueError, match="reduce op"):
        client.reduce(np.ones((2, 2)), "median")
    with pytest.raises(ValueError, match="connections must be at least 1, got 0"):
        gpucompute.Client(client.target, connections=0)


def test_threads_share_a_client_over_several_connections(server_target, rng):
    xs = [uniform(rng, (i, 33), np.float32) for i in range(1, 13)]
    with gpucompute.Client(server_target, connections=3) as client:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            outs = list(pool.map(client.transpose, xs))
        assert len(client._channels.channels) == 3
    for x, t in zip(xs, outs):
        np.testing.assert_array_equal(t, x.T)


def test_deadline(client, rng):
    a = uniform(rng, (1024, 1024), np.float64)
    with pytest.raises(gpucompute.ComputeError) as e:
        client.matmul(a, a, timeout=0.001)
    assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert client.transpose(np.ones((1, 1)), timeout=30)[0, 0] == 1  # still serving


def test_unreachable_server_is_unavailable():
    with gpucompute.Client("127.0.0.1:1", timeout=5) as c:
        with pytest.raises(gpucompute.ComputeError) as e:
            c.server_info()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_round_robin_over_dns_target(server_target):
    with gpucompute.Client(f"dns:///{server_target}", lb="round_robin") as c:
        for _ in range(4):
            assert np.array_equal(c.transpose(np.eye(3)), np.eye(3))


def test_server_info(client):
    info = client.server_info()
    assert info.backend == "cpu"
    assert "cpu_reference" in {v.name for v in info.variants}
    assert info.max_matrix_bytes > 0


def test_profile_rows(client):
    result = client.profile("matmul", (64, 48, 32), np.float32, repetitions=2)
    assert len(result) >= 1
    row = result[0]
    assert row["variant"] == "cpu_reference" and row["ok"] and row["median_us"] > 0
    # Rows are flat dicts with the same keys: what pandas.DataFrame(rows) takes.
    assert all(r.keys() == row.keys() for r in result.rows)
    text = str(result)
    assert "cpu_reference" in text and "median_us" in text
    assert json.loads(result.to_json())["variants"][0]["variant"] == "cpu_reference"
    transpose = client.profile("transpose", (33, 17), "float64")
    assert transpose[0]["ok"]
    reduce = client.profile("reduce", (33, 17), reduce_op="max", axis="per_column")
    assert reduce[0]["ok"]
    assert result.comparisons == [] and result.peak_read_gbytes_per_s > 0
    assert result.cold_cache
    assert not client.profile("transpose", (33, 17), warm_cache=True, repetitions=1).cold_cache


def test_profile_counters_say_why_there_are_none(client):
    result = client.profile("transpose", (33, 17), counters=True, repetitions=1)
    assert result.rows and all(
        "hardware counters need a CUDA device; this server runs the CPU backend" in r["note"]
        for r in result.rows
    )


def test_readme_example(server_target, capsys):
    """The README's example, run as written against this server."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code.replace("localhost:50051", server_target), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "cpu_reference" in out


def test_token_file_first_line_is_the_token(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_bytes(b"  s3cret \r\nsecond line ignored, as by the server\n")
    _, _, metadata = gpucompute._channels.channel_setup(
        "localhost:1",
        tls=False,
        root_certificates=None,
        certificate_chain=None,
        private_key=None,
        server_name=None,
        token=None,
        token_file=token_file,
        lb=None,
        options=(),
    )
    assert metadata == (("authorization", "Bearer s3cret"),)


@pytest.mark.parametrize(
    "target,expected",
    [
        ("gpu-host", "gpu-host:50051"),
        ("gpu-host:7000", "gpu-host:7000"),
        ("dns:///gpu-host", "dns:///gpu-host:50051"),
        ("dns:///gpu-host:7000", "dns:///gpu-host:7000"),
        ("[::1]", "[::1]:50051"),
        ("[::1]:7000", "[::1]:7000"),
        ("ipv4:10.0.0.1", "ipv4:10.0.0.1:50051"),
        ("unix:/run/gpucompute.sock", "unix:/run/gpucompute.sock"),
    ],
)
def test_a_target_without_a_port_gets_the_servers_default(target, expected):
    # Not gRPC's own default (443 for Python, 0 for C++ target strings).
    assert _channels.with_default_port(target) == expected
