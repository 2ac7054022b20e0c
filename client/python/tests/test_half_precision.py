"""float16 and bfloat16 through the Python client against a real server on
the CPU backend: results within the contract's 16-bit tolerances, float32
outputs, tensors, the dtype table against the server's, and bfloat16 with
and without the optional ml_dtypes package."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpucompute
from gpucompute import _dtypes
from gpucompute.v1 import compute_pb2 as pb

try:
    import ml_dtypes
except ImportError:  # the bfloat16 tests skip; the "without" test runs either way
    ml_dtypes = None

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")

# Part 3's MatMul bounds, relative to max(1, max|ref|).
MATMUL_TOL = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


@pytest.fixture(scope="module")
def client(server_target):
    with gpucompute.Client(server_target, timeout=60) as c:
        yield c


def half_dtypes():
    out = [np.dtype(np.float16)]
    if ml_dtypes is not None:
        out.append(np.dtype(ml_dtypes.bfloat16))
    return out


def uniform(rng, shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (17, 5, 33), (257, 1000, 129)])
def test_matmul_within_the_16_bit_tolerance(client, rng, m, k, n):
    for dtype in half_dtypes():
        a, b = uniform(rng, (m, k), dtype), uniform(rng, (k, n), dtype)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        scale = max(1.0, float(np.abs(ref).max()))
        c = client.matmul(a, b)
        assert c.dtype == dtype and c.shape == (m, n)
        assert np.abs(c.astype(np.float64) - ref).max() <= MATMUL_TOL[dtype.name] * scale
        c32 = client.matmul(a, b, output_dtype=np.float32)
        assert c32.dtype == np.float32
        assert np.abs(c32 - ref).max() <= 1e-4 * scale


def test_transpose_is_bit_exact_for_every_pattern(client):
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    for dtype in half_dtypes():
        x = bits.view(dtype)
        t = client.transpose(x)
        assert t.dtype == dtype
        np.testing.assert_array_equal(t.view(np.uint16), bits.T)


@pytest.mark.parametrize("op", ["sum", "min", "max", "mean"])
def test_reduce_within_tolerance(client, rng, op):
    x16 = uniform(rng, (129, 257), np.float16)
    ref = getattr(np, op)(x16.astype(np.float64), axis=1)
    out = client.reduce(x16, op, axis="per_row")
    assert out.dtype == np.float16 and out.shape == (129, 1)
    scale = np.abs(x16.astype(np.float64)).sum(axis=1) / (257 if op == "mean" else 1)
    bound = 1e-5 * scale + 2.0**-11 * np.abs(ref)
    assert np.all(np.abs(out[:, 0].astype(np.float64) - ref) <= bound + 1e-12)
    wide = client.reduce(x16, op, axis="per_row", output_dtype="float32")
    assert wide.dtype == np.float32
    assert np.all(np.abs(wide[:, 0] - ref) <= 1e-5 * scale + 1e-12)


def test_overflow_is_infinity_and_errors_name_the_field(client):
    a = np.full((1, 1), 300, np.float16)
    assert np.isinf(client.matmul(a, -a)[0, 0]) and client.matmul(a, -a)[0, 0] < 0
    assert client.matmul(a, -a, output_dtype=np.float32)[0, 0] == -90000
    with pytest.raises(gpucompute.ComputeError, match="output_dtype") as e:
        client.matmul(
            np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), output_dtype=np.float16
        )
    assert e.value.code.name == "INVALID_ARGUMENT"
    with pytest.raises(gpucompute.ComputeError, match="b.dtype"):
        client.matmul(np.ones((2, 2), np.float16), np.ones((2, 2), np.float32))


def test_tensors_keep_the_output_dtype(client, rng):
    a = uniform(rng, (8, 4), np.float16)
    with client.upload(a) as ta, client.upload(a.T.copy()) as tb:
        assert ta.dtype == np.float16
        kept = client.matmul(ta, tb, keep=True, output_dtype=np.float32)
        assert kept.dtype == np.float32 and kept.shape == (8, 8)
        np.testing.assert_allclose(
            kept.download(release=True), a.astype(np.float64) @ a.T.astype(np.float64), atol=1e-4
        )


def test_the_dtype_table_matches_the_servers():
    """The package's table (gpucompute/_dtypes.py) against the server's
    (kernels/include/gpucompute/kernels/dtype.h): names, wire values, .npy
    descriptors and element sizes."""
    header = (
        Path(__file__).resolve().parents[3]
        / "kernels"
        / "include"
        / "gpucompute"
        / "kernels"
        / "dtype.h"
    ).read_text()
    rows = re.findall(r'\{DType::k\w+,\s*"(\w+)",\s*(\d+),\s*(\d+),\s*"([^"]+)"', header)
    assert len(rows) == len(_dtypes.DTYPES) == len(pb.DType.values()) - 1
    for (wire, name, descr), (h_name, h_wire, h_size, h_descr) in zip(_dtypes.DTYPES, rows):
        assert (name, wire) == (h_name, int(h_wire))
        assert pb.DType.Name(wire) == "DTYPE_" + name.upper()
        if descr is not None:
            assert np.dtype(descr).str == h_descr and np.dtype(descr).itemsize == int(h_size)
        elif ml_dtypes is not None:
            assert np.dtype(getattr(ml_dtypes, name)).str == h_descr


@needs_ml_dtypes
def test_bfloat16_npy_files_round_trip_through_numpy(tmp_path, client, rng):
    a = uniform(rng, (5, 3), ml_dtypes.bfloat16)
    np.save(tmp_path / "a.npy", a)
    assert b"'descr': '<V2'" in (tmp_path / "a.npy").read_bytes()[:128]
    raw = np.load(tmp_path / "a.npy")  # a 2-byte void: numpy has no bfloat16
    assert raw.dtype.kind == "V" and raw.dtype.itemsize == 2
    back = raw.view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(back.view(np.uint16), a.view(np.uint16))
    t = client.transpose(back)
    np.testing.assert_array_equal(t.view(np.uint16), a.T.view(np.uint16))


def test_bfloat16_without_ml_dtypes_is_a_clear_error(server_target):
    """In a fresh interpreter where ml_dtypes cannot be imported: float16 and
    a bfloat16 Profile work; a bfloat16 result (a tensor uploaded here, when
    ml_dtypes is) raises an error that says what to install."""
    tensor_id = ""
    if ml_dtypes is not None:
        with gpucompute.Client(server_target, timeout=60) as c:
            tensor_id = c.upload(np.ones((2, 2), ml_dtypes.bfloat16), ttl_seconds=60).id
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["ml_dtypes"] = None  # import fails as if not installed
        import numpy as np
        import gpucompute
        from gpucompute import _dtypes
        with gpucompute.Client({server_target!r}, timeout=60) as c:
            assert c.transpose(np.ones((2, 3), np.float16)).shape == (3, 2)
            assert c.profile("transpose", (4, 4), "bfloat16").rows
            try:
                _dtypes.numpy_dtype(_dtypes.value("bfloat16"))
            except ImportError as e:
                print("IMPORT-ERROR:", e)
            if {tensor_id!r}:
                try:
                    c.download({tensor_id!r}, release=True)
                except gpucompute.ComputeError as e:
                    print("DOWNLOAD-ERROR:", e)
    """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "IMPORT-ERROR: bfloat16 matrices need the ml_dtypes package" in out.stdout
    if tensor_id:
        assert "DOWNLOAD-ERROR: Download failed: FAILED_PRECONDITION: bfloat16" in out.stdout
