#!/usr/bin/env bash
# CTest driver: installs the package (as an sdist-shaped copy, so the source
# tree stays clean) into a venv that sees the distribution's grpcio, protobuf,
# numpy and pytest, then runs the tests against the given server binary.
#   run-pytest.sh PYTHON PACKAGE_DIR PROTO_DIR WORK_DIR SERVER_BINARY
set -euo pipefail
python=$1 package=$2 proto=$3 work=$4 server=$5

missing=$("$python" - <<'PY'
import importlib.util
print(" ".join(m for m in ("grpc", "google.protobuf", "numpy", "pytest", "setuptools", "wheel")
               if importlib.util.find_spec(m.split(".")[0]) is None))
PY
)
if [ -n "$missing" ]; then
  echo "python tests: $python lacks: $missing (run scripts/setup)" >&2
  exit 1
fi

rm -rf "$work/src"
mkdir -p "$work/src/proto/gpucompute/v1"
cp -r "$package/pyproject.toml" "$package/setup.py" "$package/README.md" "$package/gpucompute" \
  "$work/src/"
cp "$proto/gpucompute/v1/compute.proto" "$work/src/proto/gpucompute/v1/"
[ -x "$work/venv/bin/python" ] || "$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-build-isolation --no-deps --no-index \
  --force-reinstall "$work/src"

# ml_dtypes (bfloat16 arrays) is optional for the client and not a Debian
# package: from PyPI when reachable, pinned to a release that works with
# Debian's NumPy; without it the bfloat16 tests skip and say so.
if ! "$work/venv/bin/python" -c "import ml_dtypes" 2>/dev/null; then
  "$work/venv/bin/python" -m pip install -q --no-deps --timeout 15 --retries 1 \
    "ml_dtypes==0.4.1" >/dev/null 2>&1 ||
    echo "python tests: ml_dtypes not installable here; the bfloat16 tests skip" >&2
fi

cd "$work"  # so that the installed package, not the source folder, is imported
GPUCOMPUTE_SERVER="$server" exec "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$package/tests"
