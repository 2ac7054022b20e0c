#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz (corpus/<target>/): small valid and
tricky inputs, among them every divergence from protobuf found so far.
Run from anywhere: python3 tests/fuzz/make_corpus.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(number, wire_type):
    return varint(number << 3 | wire_type)


def ld(number, payload):
    return tag(number, 2) + varint(len(payload)) + payload


def vi(number, value):
    return tag(number, 0) + varint(value & 0xFFFFFFFFFFFFFFFF)


def matrix(dtype=1, rows=1, cols=1, data=None):
    if data is None:
        data = struct.pack("<%df" % (rows * cols), *range(1, rows * cols + 1))
    return vi(1, dtype) + vi(2, rows) + vi(3, cols) + ld(4, data)


def shape(dtype=1, rows=2, cols=3):
    return vi(1, dtype) + vi(2, rows) + vi(3, cols)


def shm(region, offset, byte_size):
    return ld(1, region) + vi(2, offset) + vi(3, byte_size)


def groups(number, depth):
    return tag(number, 3) * depth + tag(number, 4) * depth


# wire_request_fuzz: kind byte (0 MatMul, 1 Transpose, 2 Reduce, 3 response,
# 4 DownloadResponse, 5 UploadRequest), a count of cut points (& 7), that
# many slice lengths, then the message.
MATMUL, TRANSPOSE, REDUCE, RESPONSE, DOWNLOAD, UPLOAD = range(6)


def case(kind, message, cuts=()):
    return bytes([kind, len(cuts)]) + bytes(cuts) + message


a = matrix(1, 2, 3)
b = matrix(1, 3, 2)
report = ld(1, b"cpu_naive") + ld(2, b"cpu") + vi(7, 42)
WIRE = {
    "matmul_valid": case(MATMUL, ld(1, a) + ld(2, b) + ld(3, b"auto") + vi(4, 1), (3, 0, 17)),
    "transpose_valid": case(TRANSPOSE, ld(1, matrix(2, 2, 2, bytes(32))) + ld(2, b"tiled"), (1, 1)),
    "reduce_valid": case(REDUCE, ld(1, a) + vi(2, 3) + vi(3, 2) + ld(4, b"cub"), (5,)),
    "empty": case(TRANSPOSE, b""),
    # A 6-byte length: protobuf refuses.
    "transpose_long_length": case(
        TRANSPOSE, bytes.fromhex("0a8c808080800008011001180122040000803f")
    ),
    # A 5-byte tag with bits above 32: protobuf keeps the low 32 (axis = 1).
    "reduce_tag_above_32_bits": case(
        REDUCE, bytes.fromhex("0a1008011002180122080000803f00000040988080801001")
    ),
    "reduce_tag_6_bytes": case(REDUCE, ld(1, a) + bytes.fromhex("98808080800001")),
    # An unknown group after a valid message: skipped.
    "transpose_unknown_group": case(TRANSPOSE, bytes.fromhex("0a0c08011001180122040000803f2b2c")),
    "transpose_nested_groups": case(TRANSPOSE, ld(1, matrix() + groups(7, 3)) + groups(5, 2)),
    "transpose_group_mismatched_end": case(TRANSPOSE, tag(5, 3) + tag(6, 4)),
    # A known field with the wrong wire type: an unknown field to protobuf.
    "transpose_wrong_wire_type": case(TRANSPOSE, bytes.fromhex("0a0c08011001180122040000803f1000")),
    "matmul_matrix_as_varint": case(MATMUL, vi(1, 5) + ld(2, b) + tag(3, 5) + b"abcd"),
    # variant must be UTF-8.
    "matmul_variant_not_utf8": case(MATMUL, ld(1, a) + ld(3, b"\xc3\x28")),
    "matmul_variant_surrogate": case(MATMUL, ld(3, b"\xed\xa0\x80")),
    "matmul_variant_4byte": case(MATMUL, ld(3, b"\xf0\x9f\x98\x80x")),
    # Repeated fields merge: later scalars and bytes win.
    "transpose_merge": case(
        TRANSPOSE,
        ld(1, matrix(1, 1, 1))
        + ld(1, vi(2, 0) + ld(4, b"\0\0\x80\x3f" * 2))
        + ld(2, b"a")
        + ld(2, b""),
    ),
    "reduce_huge_enums": case(REDUCE, vi(2, (1 << 64) - 1) + vi(3, 1 << 32 | 2)),
    "matmul_negative_rows": case(MATMUL, ld(1, vi(2, -4) + vi(3, -1))),
    "transpose_length_5_bytes": case(TRANSPOSE, tag(2, 2) + bytes.fromhex("8180808000") + b"x"),
    "transpose_length_too_big": case(TRANSPOSE, tag(2, 2) + bytes.fromhex("ffffffff07") + b"x"),
    # 100 nested groups are allowed at the top, 99 inside a Matrix.
    "transpose_groups_100": case(TRANSPOSE, groups(9, 100)),
    "transpose_groups_101": case(TRANSPOSE, groups(9, 101)),
    "transpose_matrix_groups_99": case(TRANSPOSE, ld(1, groups(9, 99))),
    "transpose_matrix_groups_100": case(TRANSPOSE, ld(1, groups(9, 100))),
    "transpose_fixed": case(TRANSPOSE, tag(9, 1) + bytes(8) + tag(10, 5) + bytes(4)),
    "transpose_end_group_top": case(TRANSPOSE, tag(9, 4)),
    "transpose_tag_zero": case(TRANSPOSE, ld(2, b"x") + b"\0"),
    "response_valid": case(RESPONSE, ld(1, matrix(2, 1, 1, bytes(8))) + ld(2, report), (2, 9)),
    "response_two_reports": case(RESPONSE, ld(2, report) + ld(2, vi(3, 0) + ld(2, b"gpu"))),
    "response_report_not_utf8": case(RESPONSE, ld(2, ld(1, b"\xff"))),
    # The payload oneof (Matrix 4 data, 5 tensor_id, 6 shared_memory) and
    # OutputPlacement (field 10 of every request).
    "matmul_tensor_and_shm": case(
        MATMUL,
        ld(1, shape() + ld(5, b"t-0123456789abcdef"))
        + ld(2, shape(1, 3, 2) + ld(6, shm(b"region-a", 64, 24)))
        + ld(10, vi(1, 1) + vi(3, 30)),
        (4, 0, 9),
    ),
    "transpose_output_shm": case(
        TRANSPOSE, ld(1, a) + ld(10, ld(2, shm(b"out", 4096, 24)) + vi(3, 0)), (2,)
    ),
    "reduce_output_keep": case(REDUCE, ld(1, a) + vi(2, 1) + ld(10, vi(1, 1)) + ld(4, b"cub")),
    # The last member wins and clears the others.
    "transpose_oneof_last_wins": case(
        TRANSPOSE,
        ld(1, shape() + ld(4, b"abcd") + ld(5, b"t1") + ld(6, shm(b"r", 1, 2)) + ld(4, b"efgh")),
    ),
    "transpose_oneof_data_then_tensor": case(TRANSPOSE, ld(1, ld(4, b"abcd") + ld(5, b"t"))),
    # shared_memory twice merges; after another member it starts fresh.
    "transpose_shm_merge": case(
        TRANSPOSE, ld(1, ld(6, shm(b"r1", 8, 16)) + ld(6, vi(2, 0) + ld(1, b"r2")))
    ),
    "transpose_shm_fresh_after_tensor": case(
        TRANSPOSE, ld(1, ld(6, shm(b"r1", 8, 16)) + ld(5, b"t") + ld(6, vi(3, 4)))
    ),
    # The Matrix twice: the oneof carries over from the first occurrence.
    "matmul_matrix_twice_oneof": case(
        MATMUL,
        ld(1, ld(6, shm(b"r1", 8, 16)))
        + ld(1, ld(6, vi(3, 32)))
        + ld(2, ld(5, b"t"))
        + ld(2, vi(2, 5)),
    ),
    "reduce_output_twice": case(
        REDUCE, ld(10, vi(1, 1) + ld(2, shm(b"r", 1, 2))) + ld(10, vi(3, 7) + ld(2, vi(2, 9)))
    ),
    # Empty members still set the case.
    "transpose_empty_members": case(TRANSPOSE, ld(1, ld(6, b"")) + ld(10, b"")),
    "matmul_empty_tensor_id": case(MATMUL, ld(1, ld(5, b"")) + ld(2, ld(4, b""))),
    # UTF-8: tensor_id and region are strings.
    "transpose_tensor_id_not_utf8": case(TRANSPOSE, ld(1, ld(5, b"\xc3\x28"))),
    "transpose_region_not_utf8": case(TRANSPOSE, ld(1, ld(6, ld(1, b"\xed\xa0\x80")))),
    "matmul_output_region_not_utf8": case(MATMUL, ld(10, ld(2, ld(1, b"\xff")))),
    "transpose_tensor_id_4byte": case(TRANSPOSE, ld(1, ld(5, b"\xf0\x9f\x98\x80"))),
    # Wrong wire types: unknown fields, the oneof untouched.
    "transpose_oneof_wrong_types": case(
        TRANSPOSE,
        ld(1, ld(4, b"ab") + vi(5, 1) + tag(6, 5) + b"abcd" + tag(6, 3) + tag(6, 4))
        + vi(10, 1)
        + ld(10, vi(2, 1) + tag(1, 1) + bytes(8)),
    ),
    # Nesting: SharedMemorySlice sits two levels down (98 group levels left).
    "transpose_shm_groups_98": case(TRANSPOSE, ld(1, ld(6, groups(9, 98)))),
    "transpose_shm_groups_99": case(TRANSPOSE, ld(1, ld(6, groups(9, 99)))),
    "reduce_output_shm_groups_98": case(REDUCE, ld(10, ld(2, groups(9, 98)))),
    "reduce_output_shm_groups_99": case(REDUCE, ld(10, ld(2, groups(9, 99)))),
    "reduce_output_groups_99": case(REDUCE, ld(10, groups(9, 99))),
    "transpose_shm_truncated": case(TRANSPOSE, ld(1, tag(6, 2) + varint(5) + vi(2, 1))),
    "response_tensor": case(RESPONSE, ld(1, shape(2, 4, 4) + ld(5, b"t-ff")) + ld(2, report), (3,)),
    "response_shm": case(
        RESPONSE, ld(1, shape(1, 1, 1) + ld(6, shm(b"out", 0, 4))) + ld(2, report)
    ),
    "response_oneof_switch": case(
        RESPONSE, ld(1, ld(6, shm(b"out", 0, 4))) + ld(1, ld(4, b"abcd")) + ld(1, ld(5, b"t"))
    ),
    # UploadRequest: the first message (shape, ttl, data), a later one (data
    # only), data twice (the later wins), a slice merged twice, a negative ttl.
    "upload_first": case(
        UPLOAD, vi(1, 1) + vi(2, 2) + vi(3, 3) + vi(4, 60) + ld(5, bytes(24)), (5, 0, 9)
    ),
    "upload_data_only": case(UPLOAD, ld(5, b"abcdefgh"), (3,)),
    "upload_data_twice": case(UPLOAD, ld(5, b"abcd") + ld(5, b"ef")),
    "upload_shm_merge": case(UPLOAD, vi(1, 2) + ld(6, shm(b"r", 0, 8)) + ld(6, vi(2, 8))),
    "upload_negative_ttl": case(UPLOAD, vi(4, (1 << 64) - 5) + ld(6, ld(1, b"\xff"))),
}

NPY_DICT = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"


def npy(header_dict, data, version=1):
    body = header_dict.encode()
    pad = 64 - (10 + len(body) + 1) % 64
    body += b" " * pad + b"\n"
    head = b"\x93NUMPY" + bytes([version, 0])
    head += struct.pack("<H", len(body)) if version == 1 else struct.pack("<I", len(body))
    return head + body + data


NPY = {
    "float32_2x3": npy(NPY_DICT, bytes(24)),
    "float64_1d": npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", bytes(24)),
    "version2": npy(NPY_DICT, bytes(24), version=2),
    "empty_shape0": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", b""),
    "fortran": npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }", bytes(4)),
    "big_endian": npy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", bytes(8)),
    "huge_shape": npy(
        "{'descr': '<f8', 'fortran_order': False, 'shape': "
        "(9223372036854775807, 9223372036854775807), }",
        b"",
    ),
    "long_literal": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1L, 2L), }", bytes(8)),
    "structured": npy(
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", bytes(4)
    ),
    "truncated": npy(NPY_DICT, bytes(20)),
    "bad_magic": b"\x93NUMPZ\x01\x00",
}


def validate_case(selector, payload):
    return bytes([selector]) + payload


VALIDATE = {
    "matmul": validate_case(0, bytes(range(64))),
    "transpose": validate_case(1, bytes(range(48))),
    "reduce": validate_case(2, bytes(range(200, 256)) + bytes(16)),
    "profile": validate_case(3, bytes(range(0, 256, 3))),
    "matmul_message": validate_case(4, ld(1, a) + ld(2, b)),
    "transpose_message": validate_case(5, ld(1, matrix(2, 2, 2, bytes(32)))),
    "reduce_message": validate_case(6, ld(1, a) + vi(2, 1) + vi(3, 2)),
    "profile_message": validate_case(
        7, vi(1, 1) + vi(2, 1) + vi(3, 64) + vi(4, 64) + vi(5, 64) + vi(9, 1) + vi(10, 3)
    ),
    "profile_huge": validate_case(
        7, vi(1, 3) + vi(2, 2) + vi(3, (1 << 62)) + vi(4, (1 << 62)) + vi(7, 2)
    ),
}


def write(target, cases):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in cases.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


write("wire_request_fuzz", WIRE)
write("npy_fuzz", NPY)
write("validate_fuzz", VALIDATE)
