#!/usr/bin/env python3
"""MatMul on tensors held by the server against the same MatMul sent inline.

  bench/tensor_residency.py HOST:PORT [--stubs DIR]

Uploads a and b once (Upload stream), then times MatMul on the resident
tensors with the output kept (no matrix bytes on the wire), and the same
MatMul inline, at 4096^3 and 64^3 FP32. Prints p50 client latency, the
server's compute_us and their difference (the per-op overhead), and the
Upload / Download rates of a 1 GiB tensor. Needs grpcio, protobuf and numpy,
and the generated compute_pb2*.py (on PYTHONPATH, or --stubs DIR).
"""
import argparse
import statistics
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("--stubs")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--variant", default="cublas")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 64])
    ap.add_argument("--big", type=int, default=16384, help="side of the Upload/Download tensor")
    args = ap.parse_args()
    if args.stubs:
        sys.path.insert(0, args.stubs)
    import grpc
    from gpucompute.v1 import compute_pb2 as pb, compute_pb2_grpc as pbg

    channel = grpc.insecure_channel(
        args.target,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    stub = pbg.ComputeStub(channel)
    chunk = 4 << 20

    def upload(array):
        raw = array.tobytes()

        def messages():
            yield pb.UploadRequest(
                dtype=pb.DTYPE_FLOAT32, rows=array.shape[0], cols=array.shape[1], data=raw[:chunk]
            )
            for at in range(chunk, len(raw), chunk):
                yield pb.UploadRequest(data=raw[at : at + chunk])

        return stub.Upload(messages(), timeout=600)

    def download(tensor_id):
        return b"".join(
            r.data for r in stub.Download(pb.DownloadRequest(tensor_id=tensor_id), timeout=600)
        )

    rng = np.random.default_rng(7)
    for n in args.sizes:
        a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        ta, tb = upload(a), upload(b)
        resident = pb.MatMulRequest(
            a=pb.Matrix(tensor_id=ta.id),
            b=pb.Matrix(tensor_id=tb.id),
            variant=args.variant,
            output=pb.OutputPlacement(keep=True),
        )
        inline = pb.MatMulRequest(
            a=pb.Matrix(dtype=pb.DTYPE_FLOAT32, rows=n, cols=n, data=a.tobytes()),
            b=pb.Matrix(dtype=pb.DTYPE_FLOAT32, rows=n, cols=n, data=b.tobytes()),
            variant=args.variant,
        )
        for name, request in (("resident, kept", resident), ("inline", inline)):
            lat, compute, kept = [], [], []
            for i in range(args.repeats + 2):
                start = time.perf_counter()
                response = stub.MatMul(request, timeout=600)
                elapsed = (time.perf_counter() - start) * 1e6
                if response.c.tensor_id:
                    kept.append(response.c.tensor_id)
                if i >= 2:
                    lat.append(elapsed)
                    compute.append(response.report.compute_us)
            if kept:
                c = np.frombuffer(download(kept[-1]), dtype=np.float32).reshape(n, n)
                ref = a.astype(np.float64) @ b.astype(np.float64)
                err = np.abs(c - ref).max() / max(1.0, np.abs(ref).max())
                stub.ReleaseTensors(pb.ReleaseTensorsRequest(tensor_ids=kept))
            else:
                err = float("nan")
            p50, cu = statistics.median(lat), statistics.median(compute)
            print(
                f"matmul {n}^3 {name:15s} p50 {p50:10.1f} us  compute_us {cu:9.1f}  "
                f"p50/compute {p50 / max(cu, 1):6.2f}  overhead {p50 - cu:9.1f} us  err {err:.1e}"
            )
        stub.ReleaseTensors(pb.ReleaseTensorsRequest(tensor_ids=[ta.id, tb.id]))

    big = rng.uniform(-1, 1, (args.big, args.big)).astype(np.float32)  # 16384: 1 GiB
    start = time.perf_counter()
    t = upload(big)
    up = time.perf_counter() - start
    start = time.perf_counter()
    back = download(t.id)
    down = time.perf_counter() - start
    stub.ReleaseTensors(pb.ReleaseTensorsRequest(tensor_ids=[t.id]))
    print(
        f"{big.nbytes >> 20} MiB tensor: upload {big.nbytes / up / 1e9:.2f} GB/s, download "
        f"{big.nbytes / down / 1e9:.2f} GB/s, round trip exact: {back == big.tobytes()}"
    )


if __name__ == "__main__":
    main()
