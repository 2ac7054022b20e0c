"""The raw compute messages are byte-for-byte what protobuf writes, and
responses parse as protobuf reads them, at any shape, dtype and option."""

import json

import numpy as np
import pytest

from gpucompute import _channels, _errors, _operands, _profile_result, _requests, _results
from gpucompute import _wire
from gpucompute.v1 import compute_pb2 as pb


def proto_matrix(array):
    dtype, a = _operands.row_major(array, "x")
    return pb.Matrix(dtype=dtype, rows=a.shape[0], cols=a.shape[1], data=a.tobytes())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant,allow_tf32", [("", False), ("register_tiled", True)])
def test_matmul_request_matches_protobuf(rng, dtype, variant, allow_tf32):
    a = rng.standard_normal((37, 200)).astype(dtype)
    b = np.asfortranarray(rng.standard_normal((200, 3)).astype(dtype))
    raw = _requests.matmul_request(a, b, variant, allow_tf32)
    expected = pb.MatMulRequest(
        a=proto_matrix(a), b=proto_matrix(b), variant=variant, allow_tf32=allow_tf32
    )
    assert raw == expected.SerializeToString()


@pytest.mark.parametrize("shape", [(1, 1), (0, 5), (129, 3)])
def test_transpose_and_reduce_requests_match_protobuf(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    assert (
        _requests.transpose_request(x, "shared")
        == pb.TransposeRequest(input=proto_matrix(x), variant="shared").SerializeToString()
    )
    for op, axis in [("sum", None), ("max", 0), ("mean", "per_row")]:
        expected = pb.ReduceRequest(
            input=proto_matrix(x),
            op=_requests.reduce_op(op),
            axis=_requests.reduce_axis(axis),
            variant="cub",
        )
        assert _requests.reduce_request(x, op, axis, "cub") == expected.SerializeToString()


def test_response_is_a_view_of_the_received_bytes(rng):
    x = rng.standard_normal((5, 7))
    report = pb.ExecutionReport(variant="naive", device="cpu", queue_us=3, total_us=-1)
    raw = pb.TransposeResponse(output=proto_matrix(x), report=report).SerializeToString()
    raw += b"\x78\x2a"  # an unknown field (15, varint) is skipped
    result = _results.result("Transpose", raw, True)
    np.testing.assert_array_equal(result.output, x)
    assert result.report == _results.Report.from_proto(report)
    assert not result.output.flags.writeable
    assert np.shares_memory(result.output, np.frombuffer(raw, dtype=np.uint8))


@pytest.mark.parametrize(
    "raw,why",
    [
        (b"\x0a\x05\x08\x01", "runs past"),  # truncated matrix
        (
            pb.ReduceResponse(
                output=pb.Matrix(dtype=pb.DTYPE_FLOAT32, rows=2, cols=2, data=b"1234")
            ).SerializeToString(),
            "2 x 2, 4 bytes",
        ),  # size disagrees with shape
        (b"\x0b", "wire type"),  # group start: unsupported
    ],
)
def test_malformed_responses_raise_internal(raw, why):
    with pytest.raises(_errors.ComputeError) as e:
        _results.result("Reduce", raw, False)
    assert e.value.code.name == "INTERNAL" and why in e.value.message


def test_varint_encodes_negative_int64_in_ten_bytes():
    assert _wire._varint(-1) == b"\xff" * 9 + b"\x01"


def test_one_dimensional_arrays_are_one_row(rng):
    """A 1-D array is 1 x N, as the CLI reads a 1-D .npy file."""
    v = rng.standard_normal(5)
    dtype, a = _operands.row_major(v, "a")
    assert dtype == pb.DTYPE_FLOAT64 and a.shape == (1, 5)
    np.testing.assert_array_equal(a[0], v)
    b = rng.standard_normal((5, 2))
    expected = pb.MatMulRequest(
        a=pb.Matrix(dtype=pb.DTYPE_FLOAT64, rows=1, cols=5, data=v.tobytes()), b=proto_matrix(b)
    )
    assert _requests.matmul_request(v, b, "", False) == expected.SerializeToString()
    for bad in (np.float64(1.0), np.ones((2, 2, 2))):
        with pytest.raises(ValueError, match="2-D array"):
            _operands.row_major(bad, "x")


def test_profile_shape_is_m_k_n():
    """(m, k, n) for matmul, the order of a @ b and of the CLI's MxKxN;
    ProfileRequest keeps its m, n, k fields."""
    r = _requests.profile_request("matmul", (64, 32, 16), np.float32, (), "sum", None, 0, 0)
    assert (r.op, r.m, r.k, r.n) == (pb.OP_MATMUL, 64, 32, 16)
    r = _requests.profile_request("transpose", (30, 20), np.float64, (), "sum", None, 0, 0)
    assert (r.m, r.n, r.k, r.dtype) == (30, 20, 0, pb.DTYPE_FLOAT64)
    with pytest.raises(ValueError, match=r"expected \(m, k, n\)"):
        _requests.profile_request("matmul", (64, 32), np.float32, (), "sum", None, 0, 0)


def test_profile_result_comparisons():
    """Comparisons come through as dicts beside the rows, in str() and JSON."""
    response = pb.ProfileResponse(
        device="cuda:0 fake",
        selected="shared",
        variants=[
            pb.VariantProfile(
                variant="shared",
                ok=True,
                median_us=5.0,
                fraction_of_roofline=1.2,
                note="above the measured ceiling: busy",
            ),
            pb.VariantProfile(variant="naive", ok=True, median_us=10.0),
        ],
        comparisons=[
            pb.Comparison(
                idea="coalescing",
                lesson="coalesce the writes",
                before="naive",
                after="shared",
                time_ratio=2.0,
            )
        ],
    )
    result = _profile_result.ProfileResult(response)
    assert result.comparisons == [
        {
            "idea": "coalescing",
            "lesson": "coalesce the writes",
            "before": "naive",
            "after": "shared",
            "time_ratio": 2.0,
            "counter": "",
            "counter_before": 0.0,
            "counter_after": 0.0,
        }
    ]
    assert result[0]["note"] == "above the measured ceiling: busy"
    text = str(result)
    assert "coalescing: naive -> shared  2.00x  coalesce the writes" in text
    assert "shared: note: above the measured ceiling" in text
    assert json.loads(result.to_json())["comparisons"][0]["time_ratio"] == 2.0
    assert _profile_result.ProfileResult(pb.ProfileResponse()).comparisons == []
    r = _requests.profile_request("transpose", (30, 20), np.float32, (), "sum", None, 0, 0, True)
    assert r.counters
    assert not _requests.profile_request(
        "transpose", (30, 20), np.float32, (), "sum", None, 0, 0
    ).counters


TENSOR_ID = "0123456789abcdef0123456789abcdef@host-a:50051"


@pytest.mark.parametrize("keep,ttl", [(False, None), (True, None), (True, 90), (True, 2**40)])
def test_tensor_operands_and_kept_outputs_match_protobuf(rng, keep, ttl):
    """Matrix.tensor_id (field 5, a oneof string) and OutputPlacement (field
    10) are written as protobuf writes them, beside inline operands."""
    x = rng.standard_normal((3, 4)).astype(np.float32)
    tensor = pb.Matrix(tensor_id=TENSOR_ID)
    output = pb.OutputPlacement(keep=True, ttl_seconds=ttl or 0) if keep else None
    kw = dict(keep=keep, ttl_seconds=ttl)
    assert (
        _requests.matmul_request(TENSOR_ID, x.T, "tiled32", True, **kw)
        == pb.MatMulRequest(
            a=tensor, b=proto_matrix(x.T), variant="tiled32", allow_tf32=True, output=output
        ).SerializeToString()
    )
    assert (
        _requests.matmul_request(x, TENSOR_ID, "", False, **kw)
        == pb.MatMulRequest(a=proto_matrix(x), b=tensor, output=output).SerializeToString()
    )
    assert (
        _requests.transpose_request(TENSOR_ID, "shared", **kw)
        == pb.TransposeRequest(input=tensor, variant="shared", output=output).SerializeToString()
    )
    assert (
        _requests.reduce_request(TENSOR_ID, "max", 0, "cub", **kw)
        == pb.ReduceRequest(
            input=tensor,
            op=pb.REDUCE_OP_MAX,
            axis=pb.REDUCE_AXIS_PER_COLUMN,
            variant="cub",
            output=output,
        ).SerializeToString()
    )
    # An inline request with keep: the operand's data, then field 10.
    assert (
        _requests.transpose_request(x, "", **kw)
        == pb.TransposeRequest(input=proto_matrix(x), output=output).SerializeToString()
    )


def test_an_empty_tensor_id_is_still_written():
    """A set oneof member is written even when empty, as protobuf does."""
    assert (
        _requests.transpose_request("", "")
        == pb.TransposeRequest(input=pb.Matrix(tensor_id="")).SerializeToString()
    )


def test_ttl_without_keep_is_refused():
    with pytest.raises(ValueError, match="keep=True"):
        _requests.transpose_request(np.ones((2, 2)), "", keep=False, ttl_seconds=5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape,chunk,ttl",
    [((3, 5), 1, 0), ((7, 13), 17, 60), ((0, 4), 8, 0), ((64, 33), 1 << 20, 5), ((1, 1), 7, 0)],
)
def test_upload_messages_match_protobuf(rng, dtype, shape, chunk, ttl):
    x = np.asfortranarray(rng.standard_normal(shape).astype(dtype))
    messages = list(_requests.upload_messages(x, ttl or None, chunk))
    payload = np.ascontiguousarray(x).tobytes()
    chunks = [payload[i : i + chunk] for i in range(0, len(payload), chunk)] or [b""]
    expected = [
        pb.UploadRequest(
            dtype=_requests.dtype_value(dtype),
            rows=shape[0],
            cols=shape[1],
            ttl_seconds=ttl,
            data=chunks[0],
        ).SerializeToString()
    ]
    expected += [pb.UploadRequest(data=d).SerializeToString() for d in chunks[1:]]
    assert messages == expected


def test_upload_argument_errors():
    with pytest.raises(ValueError, match="chunk_bytes"):
        _requests.upload_messages(np.ones((2, 2)), None, 0)
    with pytest.raises(TypeError, match="astype"):
        _requests.upload_messages(np.ones((2, 2), np.int64), None, 8)


def test_kept_output_response_is_a_tensor():
    report = pb.ExecutionReport(variant="naive", upload_us=0, compute_us=5)
    raw = pb.MatMulResponse(
        c=pb.Matrix(dtype=pb.DTYPE_FLOAT64, rows=3, cols=2, tensor_id=TENSOR_ID), report=report
    ).SerializeToString()
    made = []
    result = _results.result("MatMul", raw, True, lambda info: made.append(info) or info)
    info = made[0]
    assert result.output is info and result.report.compute_us == 5
    assert (info.id, info.dtype, info.shape, info.bytes, info.server) == (
        TENSOR_ID,
        np.dtype("<f8"),
        (3, 2),
        48,
        "host-a:50051",
    )
    # A tensor_id where an array was expected (no keep asked) is malformed.
    with pytest.raises(_errors.ComputeError, match="tensor_id"):
        _results.result("MatMul", raw, False)
    # The last payload member seen wins, as in protobuf.
    raw2 = raw + pb.MatMulResponse(c=pb.Matrix(data=b"\0" * 48)).SerializeToString()
    np.testing.assert_array_equal(_results.result("MatMul", raw2, False), np.zeros((3, 2)))


def test_download_assembles_chunks_into_one_array(rng):
    x = rng.standard_normal((5, 3))
    payload = x.tobytes()
    info = pb.TensorInfo(
        id=TENSOR_ID,
        dtype=pb.DTYPE_FLOAT64,
        rows=5,
        cols=3,
        bytes=120,
        device="cpu",
        expires_unix_ms=1_700_000_000_000,
        server="host-a:50051",
    )
    d = _results.Download()
    d.add(pb.DownloadResponse(info=info, data=payload[:7]).SerializeToString())
    for i in range(7, 120, 50):
        d.add(pb.DownloadResponse(data=payload[i : i + 50]).SerializeToString())
    out = d.result()
    np.testing.assert_array_equal(out, x)
    assert out.flags.writeable and out.flags.c_contiguous
    assert d.info.device == "cpu" and d.info.expires.year == 2023
    short = _results.Download()
    short.add(pb.DownloadResponse(info=info, data=payload[:8]).SerializeToString())
    with pytest.raises(_errors.ComputeError, match="8 bytes of 120"):
        short.result()
    with pytest.raises(_errors.ComputeError, match="more than"):
        short.add(pb.DownloadResponse(data=payload).SerializeToString())


def test_targets_route_by_instance():
    t = _channels.Targets(
        __import__("grpc"),
        ["127.0.0.1:1", "dns:///b-host:2"],
        tls=False,
        root_certificates=None,
        certificate_chain=None,
        private_key=None,
        server_name=None,
        token=None,
        token_file=None,
        lb=None,
        options=(),
    )
    try:
        assert t.known("127.0.0.1:1") == 0 and t.known("b-host:2") == 1
        assert t.known("replica-b") is None and t.unasked() == [0, 1]
        t.learn("replica-b", 1)
        assert t.known("replica-b") == 1 and t.unasked() == [0]
        assert {t.any() for _ in range(4)} == {0, 1}
    finally:
        for ch in t.all_channels():
            ch.close()
