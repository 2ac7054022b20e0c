"""Build of the gpucompute Python package.

The protobuf messages and gRPC stubs are generated at build time from the
repository's one proto/gpucompute/v1/compute.proto (never committed). The
generator is grpcio-tools when the build environment has it (pip's isolated
build installs it from pyproject.toml), else `protoc` and `grpc_python_plugin`
on PATH (Debian: protobuf-compiler, protobuf-compiler-grpc). The runtime
requirements follow from the generated code: newer generators stamp the
oldest protobuf and grpcio runtime they work with into it.
"""

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PROTO = Path("gpucompute/v1/compute.proto")
GENERATED = ("compute_pb2.py", "compute_pb2_grpc.py")


def proto_root() -> Path:
    # A repository checkout keeps the proto two levels up; an sdist carries a copy.
    for root in (HERE.parent.parent / "proto", HERE / "proto"):
        if (root / PROTO).is_file():
            return root
    sys.exit(f"gpucompute: cannot find {PROTO} under ../../proto or ./proto")


def generate(out_dir: Path) -> None:
    root = proto_root()
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        f"-I{root}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(root / PROTO),
    ]
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        protoc = None
    if protoc is not None:
        include = Path(grpc_tools.__file__).parent / "_proto"
        if protoc.main(["grpc_tools.protoc", f"-I{include}", *args]) != 0:
            sys.exit("gpucompute: grpc_tools.protoc failed on compute.proto")
        return
    protoc_bin, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if not protoc_bin or not plugin:
        sys.exit(
            "gpucompute: generating the stubs needs grpcio-tools (pip install grpcio-tools) "
            "or protoc and grpc_python_plugin on PATH (Debian: apt-get install "
            "protobuf-compiler protobuf-compiler-grpc)"
        )
    subprocess.run([protoc_bin, f"--plugin=protoc-gen-grpc_python={plugin}", *args], check=True)


def runtime_requirements(gen_dir: Path) -> list:
    pb2 = (gen_dir / "gpucompute/v1/compute_pb2.py").read_text()
    grpc_py = (gen_dir / "gpucompute/v1/compute_pb2_grpc.py").read_text()
    protobuf = "protobuf>=3.20"  # the oldest runtime with the builder API older generators use
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*[\w.]+,\s*(\d+),\s*(\d+),\s*(\d+)", pb2)
    if m:
        major, minor, patch = (int(g) for g in m.groups())
        protobuf = f"protobuf>={major}.{minor}.{patch},<{major + 1}"
    grpcio = "grpcio>=1.51"
    m = re.search(r"GRPC_GENERATED_VERSION\s*=\s*'([\d.]+)'", grpc_py)
    if m:
        grpcio = f"grpcio>={m.group(1)}"
    return [grpcio, protobuf, "numpy>=1.21"]


# Generated once per setup.py invocation: the requirements are part of the
# metadata, which pip asks for before it builds.
_GEN_DIR = Path(tempfile.mkdtemp(prefix="gpucompute-stubs-"))
generate(_GEN_DIR)


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        # Editable installs import from the source tree (ignored by git there).
        target = HERE if self.editable_mode else Path(self.build_lib)
        for name in GENERATED:
            shutil.copy2(_GEN_DIR / "gpucompute/v1" / name, target / "gpucompute/v1" / name)


class SdistWithProto(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / "proto" / PROTO
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(proto_root() / PROTO, dest)


setup(
    install_requires=runtime_requirements(_GEN_DIR),
    cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto},
)
