"""Calls over a unix socket: one server listening on TCP and on a unix
socket at once (--listen=127.0.0.1:0,unix:PATH), the CPU backend."""

import asyncio
import os
import shutil
import socket
import stat
import tempfile

import numpy as np
import pytest

import gpucompute
from conftest import start_server


@pytest.fixture(scope="module")
def both():
    """(TCP target, unix socket path) of one server listening on both."""
    # A short directory: a socket path must fit in 107 bytes.
    folder = tempfile.mkdtemp(prefix="gpucompute-py-")
    path = os.path.join(folder, "server.sock")
    try:
        for target in start_server(
            f"--listen=127.0.0.1:0,unix:{path}", "--unix_socket_mode=0600", "--metrics_listen="
        ):
            yield target, path
        assert not os.path.exists(path), "the server removes its socket when it stops"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_socket_has_the_mode_asked_for(both):
    _, path = both
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600


@pytest.mark.parametrize("form", ["unix:{}", "unix://{}"])
def test_matmul_over_the_socket_equals_over_tcp(both, rng, form):
    tcp, path = both
    target = form.format(path)  # unix:/abs/path, or unix:///abs/path
    assert gpucompute._channels.with_default_port(target) == target
    a = rng.uniform(-1, 1, size=(37, 19)).astype(np.float32)
    b = rng.uniform(-1, 1, size=(19, 23)).astype(np.float32)
    with gpucompute.Client(target, timeout=60) as local, gpucompute.Client(
        tcp, timeout=60
    ) as remote:
        over_unix, over_tcp = local.matmul(a, b), remote.matmul(a, b)
        np.testing.assert_array_equal(over_unix, over_tcp)
        np.testing.assert_allclose(over_unix, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
        # The default instance name is the TCP address's host:port.
        assert local.server_info().instance_name == tcp


def test_tensors_over_the_socket_are_the_servers(both, rng):
    tcp, path = both
    x = rng.uniform(-1, 1, size=(6, 4))
    with gpucompute.Client(f"unix:{path}", timeout=60) as local, gpucompute.Client(
        tcp, timeout=60
    ) as remote:
        with local.upload(x) as t:
            assert t.server == tcp
            # The same server, through the other listener.
            np.testing.assert_array_equal(remote.download(t.id), x)
            np.testing.assert_array_equal(local.transpose(t), x.T)


def test_asyncio_client_over_the_socket(both, rng):
    _, path = both
    x = rng.uniform(-1, 1, size=(9, 5))

    async def main():
        async with gpucompute.aio.Client(f"unix:{path}", timeout=60) as client:
            results = await asyncio.gather(*(client.transpose(x * i) for i in range(4)))
        for i, r in enumerate(results):
            np.testing.assert_array_equal(r, (x * i).T)

    asyncio.run(main())


def test_unix_only_server_names_itself_by_host_and_path(rng):
    folder = tempfile.mkdtemp(prefix="gpucompute-py-")
    path = os.path.join(folder, "only.sock")
    try:
        for first in start_server(f"--listen=unix:{path}", "--metrics_listen="):
            assert first == f"unix:{path}"
            with gpucompute.Client(first, timeout=60) as client:
                assert client.server_info().instance_name == f"{socket.gethostname()}:{path}"
                x = rng.uniform(-1, 1, size=(3, 3))
                np.testing.assert_array_equal(client.transpose(x), x.T)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
