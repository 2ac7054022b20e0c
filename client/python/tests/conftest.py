"""Starts the real gpucompute-server (CPU backend) once for the session.

GPUCOMPUTE_SERVER names the server binary; CTest passes the one it built.
"""

import os
import re
import signal
import subprocess

import numpy as np
import pytest


@pytest.fixture
def rng():
    """Fresh random data every run; the seed is printed for a failing test."""
    seed = np.random.SeedSequence().entropy
    print(f"seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def server_target():
    binary = os.environ.get("GPUCOMPUTE_SERVER")
    if not binary:
        pytest.skip("set GPUCOMPUTE_SERVER to a gpucompute-server binary to run these tests")
    proc = subprocess.Popen([binary, "--listen=127.0.0.1:0", "--backend=cpu"],
                            stdout=subprocess.PIPE, text=True)
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
