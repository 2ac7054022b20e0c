#!/usr/bin/env bash
# The GPU tests, the kernel bench and the standard load-test rows, in one go,
# on a GPU host. Every log goes to OUT_DIR; a short summary is printed last.
#   bench/gpu_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds the executables (gpucompute-server, gpucompute-loadtest,
# gpucompute-bench and the gpu tests), e.g. a build's files gathered in one
# folder. The server listens on 127.0.0.1:50051 while the rows run.
set -u
bin=${1:?usage: gpu_checks.sh BIN_DIR OUT_DIR}
out=${2:?usage: gpu_checks.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
export GPUCOMPUTE_SERVER_BINARY=$bin/gpucompute-server
summary=$out/summary.txt
: > "$summary"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$summary" 2>&1
for t in cuda_kernels_test cuda_device_fault_test host_copy_test memory_resources_test e2e_gpu_test; do
  [ -x "$bin/$t" ] || continue
  timeout 300 "$bin/$t" > "$out/$t.log" 2>&1
  echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/$t.log" | tr '\n' ' ')" >> "$summary"
done
if [ -x "$bin/e2e_batching_test" ]; then
  GPUCOMPUTE_BATCH_TEST_BACKEND=cuda timeout 300 "$bin/e2e_batching_test" \
    > "$out/e2e_batching_test.log" 2>&1
  echo "e2e_batching_test (cuda) rc=$? $(grep -E '^\[  (PASSED|FAILED)' \
    "$out/e2e_batching_test.log" | tr '\n' ' ')" >> "$summary"
fi
timeout 300 "$bin/gpucompute-bench" --json "$out/bench.json" --ceilings_out "$out/ceilings.json" \
  > "$out/bench.log" 2>&1
echo "bench rc=$?" >> "$summary"

# Ceilings from the bench's idle-device measurement, when it wrote them.
ceilings=()
[ -s "$out/ceilings.json" ] && ceilings=(--ceilings="$out/ceilings.json")
"$bin/gpucompute-server" --listen=127.0.0.1:50051 --metrics_listen= "${ceilings[@]}" \
  > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server.log" && break; sleep 0.5; done
lt=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s)
"${lt[@]}" --op=matmul --shape=1024x1024x1024 --variants=register_tiled,cublas,auto \
  --concurrency=1,8 --max_time=4s > "$out/lt_matmul1024.log" 2>&1
"${lt[@]}" --op=transpose --shape=2048x2048 --variants=auto --concurrency=1,8 --baseline=tcp \
  --max_time=4s > "$out/lt_transpose2048.log" 2>&1
"${lt[@]}" --op=transpose --shape=4096x4096 --variants=auto --concurrency=1 --baseline=tcp \
  --max_time=10s > "$out/lt_transpose64mib.log" 2>&1
"${lt[@]}" --op=transpose --shape=1x1 --variants=auto --concurrency=1 --baseline=tcp,grpc \
  --max_time=4s > "$out/lt_1x1.log" 2>&1
small_rows() {  # 64^3 MatMul beside the no-op gRPC floor, 1 and 8 connections
  for conns in 1 8; do
    "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=1,8,64 --baseline=grpc \
      --connections=$conns --max_time=4s > "$out/lt_matmul64_$1_conn$conns.log" 2>&1
  done
}
small_rows unbatched
kill -TERM "$server"
wait "$server"
echo "server exit rc=$?" >> "$summary"

# The same small rows with batching on, to see what it buys.
"$bin/gpucompute-server" --listen=127.0.0.1:50051 --metrics_listen= --max_batch_size=16 \
  > "$out/server_batched.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server_batched.log" && break; sleep 0.5; done
small_rows batched
kill -TERM "$server"
wait "$server"

tail -n 14 "$out/bench.log" >> "$summary"
for f in "$out"/lt_*.log; do
  echo "== $(basename "$f")" >> "$summary"
  grep -E " c=[0-9]+ " "$f" >> "$summary"
done
cat "$summary"
