"""Starts the real gpucompute-server (CPU backend) once for the session.

GPUCOMPUTE_SERVER names the server binary; CTest passes the one it built.
"""

import os
import re
import signal
import socket
import subprocess

import numpy as np
import pytest


@pytest.fixture
def rng():
    """Fresh random data every run; the seed is printed for a failing test."""
    seed = np.random.SeedSequence().entropy
    print(f"seed {seed}")
    return np.random.default_rng(seed)


def start_server(*flags):
    """Starts the server binary GPUCOMPUTE_SERVER names on a free port (CPU
    backend); yields its target and stops it with SIGTERM."""
    binary = os.environ.get("GPUCOMPUTE_SERVER")
    if not binary:
        pytest.skip("set GPUCOMPUTE_SERVER to a gpucompute-server binary to run these tests")
    proc = subprocess.Popen(
        [binary, "--listen=127.0.0.1:0", "--backend=cpu", *flags], stdout=subprocess.PIPE, text=True
    )
    try:
        target = None
        for line in proc.stdout:
            m = re.search(r"listening on (\S+)", line)
            if m:
                target = m.group(1)
                break
        assert target, f"server exited with {proc.wait()} before listening"
        yield target
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def server_target():
    yield from start_server()


@pytest.fixture(scope="session")
def shm_target():
    """A server that maps clients' shared memory (--allow_shared_memory);
    server_target runs without it."""
    yield from start_server("--allow_shared_memory")


@pytest.fixture(scope="session")
def replica_target():
    """A second server, named replica-b in its tensor ids."""
    yield from start_server("--instance_name=replica-b")


@pytest.fixture(scope="session")
def third_target():
    """A third server under its default instance name: the host:port it
    listens on, here 127.0.0.1 and a port found free."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for target in start_server(f"--listen=127.0.0.1:{port}"):
        assert target == f"127.0.0.1:{port}"
        yield target
