#!/usr/bin/env python3
"""Every rpc of the Compute service is reachable from the C++ client, the
CLI and both Python clients (sync and asyncio).

The rpcs are read from proto/gpucompute/v1/compute.proto; REACH names each
one's C++ method, CLI command and Python method. A new rpc fails here until
it has all four and a row below; a renamed or removed method fails too.
Sources are read, nothing is built or run, so this runs in every build.

Run: python3 tests/unit/rpc_reachability_test.py [-v]
"""

import os
import pathlib
import re
import unittest

ROOT = pathlib.Path(os.environ.get("GPUCOMPUTE_SOURCE_DIR",
                                   pathlib.Path(__file__).resolve().parents[2]))

# rpc: (C++ Client method, CLI command or op flag, Python method)
REACH = {
    "MatMul": ("MatMul", "matmul", "matmul"),
    "Transpose": ("Transpose", "transpose", "transpose"),
    "Reduce": ("Reduce", "reduce", "reduce"),
    "Profile": ("Profile", "profile", "profile"),
    "GetServerInfo": ("GetServerInfo", "info", "server_info"),
    "Upload": ("Upload", "upload", "upload"),
    "Download": ("Download", "download", "download"),
    "ReleaseTensors": ("Release", "release", "release"),
    "ListTensors": ("ListTensors", "tensors", "tensors"),
    # The ops' --shm flag registers a region for the call and unregisters it.
    "RegisterSharedMemory": ("RegisterSharedMemory", "--shm", "shared_memory"),
    "UnregisterSharedMemory": ("UnregisterSharedMemory", "unregister", "unregister_shared_memory"),
    "ListSharedMemory": ("ListSharedMemory", "regions", "list_shared_memory"),
}


def read(relative):
    return (ROOT / relative).read_text()


def cli_sources():
    return "".join(p.read_text() for p in sorted((ROOT / "client/cli").glob("*.cc")))


class RpcReachability(unittest.TestCase):
    def test_every_rpc_has_a_row_and_every_row_an_rpc(self):
        proto = read("proto/gpucompute/v1/compute.proto")
        service = proto[proto.index("service Compute {"):]
        service = service[:service.index("\n}")]
        rpcs = set(re.findall(r"^\s*rpc\s+(\w+)\s*\(", service, re.M))
        self.assertGreaterEqual(len(rpcs), 12, "the proto's service was not parsed")
        self.assertEqual(sorted(rpcs - REACH.keys()), [],
                         "rpcs with no client, CLI and Python row here")
        self.assertEqual(sorted(REACH.keys() - rpcs), [], "rows for rpcs the proto lacks")

    def test_the_cpp_client_has_each_method(self):
        header = read("client/include/gpucompute/client.h")
        for rpc, (method, _, _) in REACH.items():
            with self.subTest(rpc=rpc):
                self.assertRegex(header, rf"\b{method}\(", f"Client::{method} for {rpc}")

    def test_the_cli_has_each_command(self):
        sources = cli_sources()
        for rpc, (_, command, _) in REACH.items():
            with self.subTest(rpc=rpc):
                name = command[2:] if command.startswith("--") else command
                # A command-table or flag-table entry: {"name", ...
                self.assertRegex(sources, rf'\{{"{re.escape(name)}",',
                                 f"CLI {command} for {rpc}")

    def test_both_python_clients_have_each_method(self):
        for module in ("client.py", "aio.py"):
            source = read(f"client/python/gpucompute/{module}")
            for rpc, (_, _, method) in REACH.items():
                with self.subTest(rpc=rpc, module=module):
                    found = re.search(rf"^\s+(async\s+)?def {method}\(", source, re.M)
                    self.assertIsNotNone(found, f"{module}: {method} for {rpc}")


if __name__ == "__main__":
    unittest.main()
