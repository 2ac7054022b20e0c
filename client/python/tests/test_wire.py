"""The raw compute messages are byte-for-byte what protobuf writes, and
responses parse as protobuf reads them, at any shape, dtype and option."""

import numpy as np
import pytest

from gpucompute import _common as c
from gpucompute import _wire
from gpucompute.v1 import compute_pb2 as pb


def proto_matrix(array):
    dtype, a = c.row_major(array, "x")
    return pb.Matrix(dtype=dtype, rows=a.shape[0], cols=a.shape[1], data=a.tobytes())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("variant,allow_tf32", [("", False), ("register_tiled", True)])
def test_matmul_request_matches_protobuf(rng, dtype, variant, allow_tf32):
    a = rng.standard_normal((37, 200)).astype(dtype)
    b = np.asfortranarray(rng.standard_normal((200, 3)).astype(dtype))
    raw = c.matmul_request(a, b, variant, allow_tf32)
    expected = pb.MatMulRequest(a=proto_matrix(a), b=proto_matrix(b), variant=variant,
                                allow_tf32=allow_tf32)
    assert raw == expected.SerializeToString()


@pytest.mark.parametrize("shape", [(1, 1), (0, 5), (129, 3)])
def test_transpose_and_reduce_requests_match_protobuf(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    assert c.transpose_request(x, "shared") == pb.TransposeRequest(
        input=proto_matrix(x), variant="shared").SerializeToString()
    for op, axis in [("sum", None), ("max", 0), ("mean", "per_row")]:
        expected = pb.ReduceRequest(input=proto_matrix(x), op=c.reduce_op(op),
                                    axis=c.reduce_axis(axis), variant="cub")
        assert c.reduce_request(x, op, axis, "cub") == expected.SerializeToString()


def test_response_is_a_view_of_the_received_bytes(rng):
    x = rng.standard_normal((5, 7))
    report = pb.ExecutionReport(variant="naive", device="cpu", queue_us=3, total_us=-1)
    raw = pb.TransposeResponse(output=proto_matrix(x), report=report).SerializeToString()
    raw += b"\x78\x2a"  # an unknown field (15, varint) is skipped
    result = c.result("Transpose", raw, True)
    np.testing.assert_array_equal(result.output, x)
    assert result.report == c.Report.from_proto(report)
    assert not result.output.flags.writeable
    assert np.shares_memory(result.output, np.frombuffer(raw, dtype=np.uint8))


@pytest.mark.parametrize("raw,why", [
    (b"\x0a\x05\x08\x01", "runs past"),                         # truncated matrix
    (pb.ReduceResponse(output=pb.Matrix(dtype=pb.DTYPE_FLOAT32, rows=2, cols=2, data=b"1234"))
     .SerializeToString(), "2 x 2, 4 bytes"),                   # size disagrees with shape
    (b"\x0b", "wire type"),                                      # group start: unsupported
])
def test_malformed_responses_raise_internal(raw, why):
    with pytest.raises(c.ComputeError) as e:
        c.result("Reduce", raw, False)
    assert e.value.code.name == "INTERNAL" and why in e.value.message


def test_varint_encodes_negative_int64_in_ten_bytes():
    assert _wire._varint(-1) == b"\xff" * 9 + b"\x01"


def test_one_dimensional_arrays_are_one_row(rng):
    """A 1-D array is 1 x N, as the CLI reads a 1-D .npy file."""
    v = rng.standard_normal(5)
    dtype, a = c.row_major(v, "a")
    assert dtype == pb.DTYPE_FLOAT64 and a.shape == (1, 5)
    np.testing.assert_array_equal(a[0], v)
    b = rng.standard_normal((5, 2))
    expected = pb.MatMulRequest(a=pb.Matrix(dtype=pb.DTYPE_FLOAT64, rows=1, cols=5,
                                            data=v.tobytes()), b=proto_matrix(b))
    assert c.matmul_request(v, b, "", False) == expected.SerializeToString()
    for bad in (np.float64(1.0), np.ones((2, 2, 2))):
        with pytest.raises(ValueError, match="2-D array"):
            c.row_major(bad, "x")


def test_profile_shape_is_m_k_n():
    """(m, k, n) for matmul, the order of a @ b and of the CLI's MxKxN;
    ProfileRequest keeps its m, n, k fields."""
    r = c.profile_request("matmul", (64, 32, 16), np.float32, (), "sum", None, 0, 0)
    assert (r.op, r.m, r.k, r.n) == (pb.OP_MATMUL, 64, 32, 16)
    r = c.profile_request("transpose", (30, 20), np.float64, (), "sum", None, 0, 0)
    assert (r.m, r.n, r.k, r.dtype) == (30, 20, 0, pb.DTYPE_FLOAT64)
    with pytest.raises(ValueError, match=r"expected \(m, k, n\)"):
        c.profile_request("matmul", (64, 32), np.float32, (), "sum", None, 0, 0)
