"""Channels to servers: the default port, channel options, credentials and
call metadata (channel_setup), one target's channels (Channels), and the
routing of calls over several targets (Targets)."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union

import grpc

from gpucompute.v1 import compute_pb2 as pb
from gpucompute.v1 import compute_pb2_grpc as pb_grpc

PathOrBytes = Union[str, Path, bytes, None]


# MatMul, Transpose and Reduce travel as raw bytes (see _wire): gRPC neither
# serializes the request nor parses the response.
COMPUTE_METHODS = ("MatMul", "Transpose", "Reduce")

# The port a target without one gets: the server's default.
DEFAULT_PORT = 50051


def with_default_port(target: str) -> str:
    """`target` with DEFAULT_PORT added when it names a host without a port
    ("gpu-host" -> "gpu-host:50051", "dns:///gpu-host" -> "dns:///gpu-host:50051",
    "[::1]" -> "[::1]:50051"), as the C++ client does; targets with a port,
    unix: sockets and other schemes are returned as they are."""
    prefix, host = "", target
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            prefix, host = scheme, target[len(scheme) :]
            break
    if not prefix and ":" in target and not target.startswith("["):
        return target
    if not host or "," in host:
        return target
    if host.startswith("["):
        has_port = "]" in host and host.rfind(":") > host.rfind("]")
    else:
        has_port = ":" in host
    return target if has_port else f"{prefix}{host}:{DEFAULT_PORT}"


class Channels:
    """A client's channels, for `module` grpc or grpc.aio, and its calls on
    them: MatMul, Transpose and Reduce (bytes in, bytes out) take turns on
    the channels, the other methods use the first."""

    def __init__(self, module, target: str, connections: int = 1, **setup):
        target = with_default_port(target)
        credentials, opts, self.metadata = channel_setup(target, connections=connections, **setup)
        self.channels = [
            module.secure_channel(target, credentials, opts)
            if credentials
            else module.insecure_channel(target, opts)
            for _ in range(connections)
        ]
        self._stub = pb_grpc.ComputeStub(self.channels[0])
        self._compute = [
            {m: ch.unary_unary(f"/gpucompute.v1.Compute/{m}") for m in COMPUTE_METHODS}
            for ch in self.channels
        ]
        # Upload's messages are written by hand (_wire.upload_messages) and
        # Download's read by hand (Download), so that chunks are copied once.
        self._streams = [
            {
                "Upload": ch.stream_unary(
                    "/gpucompute.v1.Compute/Upload", response_deserializer=pb.TensorInfo.FromString
                ),
                "Download": ch.unary_stream(
                    "/gpucompute.v1.Compute/Download",
                    request_serializer=pb.DownloadRequest.SerializeToString,
                ),
            }
            for ch in self.channels
        ]
        self._turn = itertools.count()

    def call(self, method: str):
        """The multicallable for `method` ("MatMul", "Profile", ...)."""
        if method in COMPUTE_METHODS:
            return self._compute[next(self._turn) % len(self._compute)][method]
        if method in ("Upload", "Download"):
            return self._streams[next(self._turn) % len(self._streams)][method]
        return getattr(self._stub, method)


class Targets:
    """The Channels of each target a client was given, and which instance
    (TensorInfo.server, the @<instance> suffix of a tensor id) each serves.
    Calls naming no tensor take turns over the targets; a call naming one goes
    to the target whose server holds it. Behind a balanced target (lb=...),
    which replica a channel reaches changes from call to call, so a call
    naming a tensor goes to a channel opened to its instance as an address
    (deploy/README.md: each pod's --instance_name is its pod IP:port)."""

    def __init__(self, module, targets: Union[str, Sequence[str]], connections: int = 1, **setup):
        if isinstance(targets, str):
            targets = [targets]
        targets = list(targets)
        if not targets:
            raise ValueError("give at least one target")
        self.targets = [with_default_port(t) for t in targets]
        self.channels = [Channels(module, t, connections, **setup) for t in targets]
        self.base = len(self.channels)  # the targets given; later ones: instances dialled
        self.balanced = bool(setup.get("lb"))
        self._dial = lambda address: Channels(module, address, connections, **setup)
        self.instances: dict = {}  # instance name -> index into channels
        self.asked: set = set()  # indexes whose GetServerInfo answered
        self._turn = itertools.count()
        self._lock = threading.Lock()

    @property
    def metadata(self):
        return self.channels[0].metadata

    def all_channels(self) -> list:
        return [ch for c in self.channels for ch in c.channels]

    def any(self) -> int:
        """The target of a call that names no tensor."""
        return next(self._turn) % self.base if self.base > 1 else 0

    def learn(self, instance: str, index: int) -> None:
        # A balanced target's channel reaches no one replica in particular.
        if instance and not (self.balanced and index < self.base):
            self.instances.setdefault(instance, index)

    def known(self, instance: str) -> Optional[int]:
        """The target of `instance` if known: learnt from an answer, or a
        target spelt as the instance (the server's default instance name is
        the host:port it listens on)."""
        if instance in self.instances:
            return self.instances[instance]
        if self.balanced:
            return None
        if self.base == 1:
            return 0
        for i, t in enumerate(self.targets):
            if instance and t.split("///")[-1] == with_default_port(instance):
                return i
        return None

    def unasked(self) -> list:
        """Targets whose instance name is not known yet (GetServerInfo tells)."""
        if self.balanced:
            return []
        return [
            i for i in range(self.base) if i not in self.asked and i not in self.instances.values()
        ]

    def unknown(self, instance: str) -> int:
        """The target of an instance no target answered for: behind a
        balanced target a new channel to the instance as an address, else the
        first target (whose server answers NOT_FOUND naming the holder)."""
        if not (self.balanced and instance):
            return 0
        with self._lock:
            if instance not in self.instances:
                self.channels.append(self._dial(instance))
                self.instances[instance] = len(self.channels) - 1
            return self.instances[instance]


def _read(value: PathOrBytes) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def channel_setup(
    target: str,
    *,
    tls: bool,
    root_certificates: PathOrBytes,
    certificate_chain: PathOrBytes,
    private_key: PathOrBytes,
    server_name: Optional[str],
    token: Optional[str],
    token_file: PathOrBytes,
    lb: Optional[str],
    options: Sequence[Tuple[str, Any]],
    connections: int = 1,
):
    """(credentials or None, channel options, call metadata) for new channels."""
    if connections < 1:
        raise ValueError(f"connections must be at least 1, got {connections}")
    if token and token_file:
        raise ValueError("give the bearer token as token= or token_file=, not both")
    if (certificate_chain is None) != (private_key is None):
        raise ValueError("mutual TLS needs both certificate_chain and private_key")
    if token_file is not None:
        # The first line, as the server reads its --auth_token_file.
        token = _read(token_file).decode().split("\n", 1)[0].strip()
        if not token:
            raise ValueError(f"bearer token file {token_file!s} is empty")
    metadata = (("authorization", f"Bearer {token}"),) if token else ()

    opts = {
        # gRPC's default caps messages at 4 MiB; matrices are larger.
        "grpc.max_send_message_length": -1,
        "grpc.max_receive_message_length": -1,
    }
    if lb:
        # Spreads calls over every address a dns:/// target resolves to.
        opts["grpc.service_config"] = json.dumps({"loadBalancingConfig": [{lb: {}}]})
    if server_name:
        opts["grpc.ssl_target_name_override"] = server_name
    if connections > 1:
        # Otherwise channels with equal options share one connection.
        opts["grpc.use_local_subchannel_pool"] = 1
    opts.update(dict(options))

    credentials = None
    if tls or root_certificates is not None or certificate_chain is not None or server_name:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(root_certificates),
            private_key=_read(private_key),
            certificate_chain=_read(certificate_chain),
        )
    return credentials, list(opts.items()), metadata
