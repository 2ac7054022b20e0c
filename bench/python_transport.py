#!/usr/bin/env python3
"""Round trip of one large Transpose from Python, two ways in the same run:
through the generated protobuf stub (the payload copied into the message, its
serialization and out of the parsed response) and through gpucompute.Client
(the raw wire path, see gpucompute/_wire.py). Then --threads threads share one
client, over one connection and over --threads connections. Every result is
checked.

    python3 bench/python_transport.py --server 127.0.0.1:50051 [--size 4096] [--runs 7]
"""

import argparse
import concurrent.futures
import statistics
import time

import numpy as np

import gpucompute
from gpucompute.v1 import compute_pb2 as pb
from gpucompute.v1 import compute_pb2_grpc as pb_grpc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--size", type=int, default=4096, help="the matrix is size x size FP32")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()

    n = args.size
    x = np.random.default_rng().uniform(-1, 1, (n, n)).astype(np.float32)
    with gpucompute.Client(args.server, timeout=300) as client:
        stub = pb_grpc.ComputeStub(client._channels.channels[0])  # same channel and options

        def via_protobuf():
            request = pb.TransposeRequest(
                input=pb.Matrix(dtype=pb.DTYPE_FLOAT32, rows=n, cols=n, data=x.tobytes())
            )
            out = stub.Transpose(request, timeout=300).output
            return np.frombuffer(out.data, dtype=np.float32).reshape(out.rows, out.cols)

        def via_client():
            return client.transpose(x)

        medians = {}
        for name, call in [("protobuf stub", via_protobuf), ("gpucompute.Client", via_client)]:
            if not np.array_equal(call(), x.T):  # also the warm-up
                raise SystemExit(f"{name}: wrong result")
            times = []
            for _ in range(args.runs):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            medians[name] = statistics.median(times)

    payload = 2 * x.nbytes
    print(f"Transpose {n}x{n} FP32 ({payload / 2**20:.0f} MiB both ways), median of {args.runs}")
    for name, t in medians.items():
        print(f"  {name:18s} {t * 1e3:8.1f} ms  {payload / t / 1e9:5.2f} GB/s payload")
    print(
        f"  speed-up of the client's raw path: "
        f"{medians['protobuf stub'] / medians['gpucompute.Client']:.2f}x"
    )

    print(f"{args.threads} threads, {args.runs} calls each, one shared client:")
    for connections in sorted({1, args.threads}):
        with gpucompute.Client(args.server, timeout=300, connections=connections) as client:

            def work(_):
                for _ in range(args.runs):
                    if not np.array_equal(client.transpose(x), x.T):
                        raise SystemExit("wrong result")

            work(0)  # connects and warms up
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(work, range(args.threads)))
            seconds = time.perf_counter() - start
        total = payload * args.threads * args.runs
        print(f"  connections={connections:<3d} {total / seconds / 1e9:5.2f} GB/s payload")


if __name__ == "__main__":
    main()
