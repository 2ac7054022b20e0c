#!/usr/bin/env python3
"""Every rpc of the Compute service is reachable from the C++ client, the
CLI and both Python clients (sync and asyncio).

The rpcs are read from proto/gpucompute/v1/compute.proto. A new rpc needs
no row here: it is reached through `Client::<Rpc>(` in the C++ client, a
CLI command that calls that method, and in Python either a hand-written
method (HAND_WRITTEN in gpucompute/_generated_methods.py) or, for a unary
rpc, the one generated from the service descriptor. RENAMED keeps the older
rpcs whose C++ method or CLI command has another name. Sources are read,
nothing is built or run, so this runs in every build.

Run: python3 tests/unit/rpc_reachability_test.py [-v]
"""

import ast
import os
import pathlib
import re
import unittest

ROOT = pathlib.Path(
    os.environ.get("GPUCOMPUTE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2])
)

# rpc: (C++ Client method, CLI command or op flag), where either is not the
# default (the rpc's name, and a command calling it).
RENAMED = {
    "MatMul": ("MatMul", "matmul"),
    "Transpose": ("Transpose", "transpose"),
    "Reduce": ("Reduce", "reduce"),
    "Profile": ("Profile", "profile"),
    "GetServerInfo": ("GetServerInfo", "info"),
    "Upload": ("Upload", "upload"),
    "Download": ("Download", "download"),
    "ReleaseTensors": ("Release", "release"),
    "ListTensors": ("ListTensors", "tensors"),
    # The ops' --shm flag registers a region for the call and unregisters it.
    "RegisterSharedMemory": ("RegisterSharedMemory", "--shm"),
    "UnregisterSharedMemory": ("UnregisterSharedMemory", "unregister"),
    "ListSharedMemory": ("ListSharedMemory", "regions"),
}


def read(relative):
    return (ROOT / relative).read_text()


def cli_sources():
    return "".join(p.read_text() for p in sorted((ROOT / "client/cli").glob("*.cc")))


def rpcs():
    """rpc name -> whether either side streams."""
    proto = read("proto/gpucompute/v1/compute.proto")
    service = proto[proto.index("service Compute {") :]
    service = service[: service.index("\n}")]
    found = re.findall(
        r"^\s*rpc\s+(\w+)\s*\(\s*(stream\s+)?\w+\s*\)\s*returns\s*\(\s*(stream\s+)?", service, re.M
    )
    return {name: bool(a or b) for name, a, b in found}


def hand_written():
    """_generated_methods.HAND_WRITTEN, read without importing the package."""
    tree = ast.parse(read("client/python/gpucompute/_generated_methods.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "HAND_WRITTEN" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("_generated_methods.py has no HAND_WRITTEN")


class RpcReachability(unittest.TestCase):
    def test_the_proto_was_parsed(self):
        self.assertGreaterEqual(len(rpcs()), 12, "the proto's service was not parsed")
        self.assertEqual(
            sorted(RENAMED.keys() - rpcs().keys()), [], "rows for rpcs the proto lacks"
        )

    def test_the_cpp_client_has_each_method(self):
        header = read("client/include/gpucompute/client.h")
        for rpc in rpcs():
            method = RENAMED.get(rpc, (rpc, None))[0]
            with self.subTest(rpc=rpc):
                self.assertTrue(
                    re.search(rf"\b{method}\(", header),
                    f"client.h has no Client::{method} for {rpc}",
                )

    def test_the_cli_has_each_command(self):
        sources = cli_sources()
        for rpc in rpcs():
            with self.subTest(rpc=rpc):
                if rpc not in RENAMED:
                    self.assertTrue(
                        re.search(rf"\.{rpc}\(", sources), f"no CLI command calls Client::{rpc}"
                    )
                    continue
                command = RENAMED[rpc][1]
                name = command[2:] if command.startswith("--") else command
                # A command-table or flag-table entry: {"name", ...
                self.assertTrue(
                    re.search(rf'\{{"{re.escape(name)}",', sources),
                    f"no CLI command or flag {command} for {rpc}",
                )

    def test_both_python_clients_have_each_method(self):
        table = hand_written()
        self.assertEqual(
            sorted(table.keys() - rpcs().keys()), [], "HAND_WRITTEN rows for rpcs the proto lacks"
        )
        for rpc, streams in rpcs().items():
            with self.subTest(rpc=rpc):
                if rpc not in table:
                    # Generated (add_generated_methods), which takes unary rpcs only.
                    self.assertFalse(streams, f"{rpc} streams: add hand-written methods")
                    continue
                for module in ("client.py", "aio.py"):
                    source = read(f"client/python/gpucompute/{module}")
                    found = re.search(rf"^\s+(async\s+)?def {table[rpc]}\(", source, re.M)
                    self.assertIsNotNone(found, f"{module}: {table[rpc]} for {rpc}")


if __name__ == "__main__":
    unittest.main()
