#!/usr/bin/env bash
# Local clients on a GPU host: the shared-memory e2e tests on the GPU, then
# load-test rows comparing TCP, a unix socket and shared memory for the same
# ops. Every log goes to OUT_DIR; a short summary is printed last.
#   bench/shm_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds gpucompute-server, gpucompute-loadtest and
# e2e_shared_memory_test. The server listens on 127.0.0.1:50051 and on a
# unix socket in OUT_DIR while the rows run.
set -u
bin=${1:?usage: shm_checks.sh BIN_DIR OUT_DIR}
out=${2:?usage: shm_checks.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
summary=$out/shm_summary.txt
: > "$summary"
export GPUCOMPUTE_SERVER_BINARY=$bin/gpucompute-server
if [ -x "$bin/e2e_shared_memory_test" ]; then
  GPUCOMPUTE_TEST_BACKEND=cuda timeout 300 "$bin/e2e_shared_memory_test" \
    > "$out/e2e_shared_memory_test.log" 2>&1
  echo "e2e_shared_memory_test (cuda) rc=$? $(grep -E '^\[  (PASSED|FAILED)' \
    "$out/e2e_shared_memory_test.log" | tr '\n' ' ')" >> "$summary"
fi

sock=$out/gpucompute.sock
"$bin/gpucompute-server" --listen=127.0.0.1:50051,unix:$sock --allow_shared_memory \
  --metrics_listen= > "$out/shm_server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/shm_server.log" && break; sleep 0.5; done
lt=("$bin/gpucompute-loadtest" --warmup=0.5s --window=0.5s --variants=auto)
# 64 MiB FP32 Transpose: inline over TCP, inline over the unix socket, shm.
"${lt[@]}" --server=127.0.0.1:50051 --op=transpose --shape=4096x4096 --concurrency=1 \
  --baseline=tcp --max_time=10s > "$out/shm_transpose64_tcp.log" 2>&1
"${lt[@]}" --server=unix:$sock --op=transpose --shape=4096x4096 --concurrency=1 \
  --placement=inline,shm --max_time=10s > "$out/shm_transpose64_unix.log" 2>&1
# MatMul 4096^3 FP32: inline over TCP and the unix socket, a, b and c in shm.
"${lt[@]}" --server=127.0.0.1:50051 --op=matmul --shape=4096x4096x4096 --concurrency=1 \
  --max_time=10s > "$out/shm_matmul4096_tcp.log" 2>&1
"${lt[@]}" --server=unix:$sock --op=matmul --shape=4096x4096x4096 --concurrency=1 \
  --placement=inline,shm --max_time=10s > "$out/shm_matmul4096_unix.log" 2>&1
# 256 MiB in and out of a pinned region: the report's upload and download
# stages are the device copies.
"${lt[@]}" --server=unix:$sock --op=transpose --shape=8192x8192 --concurrency=1 \
  --placement=shm --max_time=10s > "$out/shm_transpose256.log" 2>&1
# 16 local clients, 64 MiB Transpose each, in and out of shared memory.
"${lt[@]}" --server=unix:$sock --op=transpose --shape=4096x4096 --concurrency=16 \
  --connections=16 --placement=shm --max_time=10s > "$out/shm_transpose64_c16.log" 2>&1
kill -TERM "$server"
wait "$server"
echo "server exit rc=$?" >> "$summary"
for f in "$out"/shm_*.log; do
  echo "== $(basename "$f")" >> "$summary"
  grep -E " c=[0-9]+ |placement shm" "$f" >> "$summary"
done
cat "$summary"
