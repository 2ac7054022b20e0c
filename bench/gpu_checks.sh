#!/usr/bin/env bash
# The GPU tests, the hostile end-to-end suites against the CUDA backend,
# compute-sanitizer over the shared-memory and tensor suites, the kernel
# bench and the standard load-test rows, on a GPU host. Every log goes to
# OUT_DIR; a short summary is printed last.
#   bench/gpu_checks.sh BIN_DIR OUT_DIR [PARTS]
# PARTS is a comma-separated subset of tests,hostile,memcheck,bench (all
# by default), so that each part can run in its own shorter session.
# BIN_DIR holds the executables (gpucompute-server, gpucompute-loadtest,
# gpucompute-bench and the test executables), e.g. a build's files gathered
# in one folder. The server listens on 127.0.0.1:50051 while the rows run.
set -u
bin=${1:?usage: gpu_checks.sh BIN_DIR OUT_DIR [PARTS]}
out=${2:?usage: gpu_checks.sh BIN_DIR OUT_DIR [PARTS]}
parts=,${3:-tests,hostile,memcheck,bench},
mkdir -p "$out"
export GPUCOMPUTE_SERVER_BINARY=$bin/gpucompute-server
summary=$out/summary.txt
: > "$summary"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$summary" 2>&1
wants() { [[ $parts == *,$1,* ]]; }

# Runs test executable $1 (skipped when absent) with a log named $2 and
# the arguments after them; SUITE_TIMEOUT bounds each (seconds).
suite() {
  local t=$1 name=$2 log=$out/$2.log
  shift 2
  [ -x "$bin/$t" ] || return 0
  timeout "${SUITE_TIMEOUT:-600}" "$bin/$t" "$@" > "$log" 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$log" | tr '\n' ' ')" >> "$summary"
}

if wants tests; then
  for t in cuda_kernels_test cuda_device_fault_test pinned_region_test host_copy_test \
    memory_resources_test e2e_gpu_test; do
    suite "$t" "$t"
  done
fi

# The suites CI runs against the CPU backend, here against CUDA (less the
# command-line tests, which run the built binary's path and parse flags).
if wants hostile; then
  for t in e2e_hardening_test e2e_shared_memory_test e2e_shrunk_region_test e2e_tensor_test \
    e2e_batching_test; do
    GPUCOMPUTE_TEST_BACKEND=cuda suite "$t" "${t}_cuda" --gtest_filter=-ServerCommandLine.*:ServerPort.*
  done
fi

# compute-sanitizer's memcheck over the servers of the shared-memory and
# tensor suites: each server writes its report to a log of its own.
if wants memcheck; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for t in e2e_shared_memory_test e2e_shrunk_region_test e2e_tensor_test; do
    GPUCOMPUTE_TEST_BACKEND=cuda GPUCOMPUTE_SERVER_WRAPPER="$sanitizer --tool memcheck \
      --log-file $out/memcheck_${t}.%p.log" suite "$t" "${t}_memcheck"
  done
  errors=$(cat "$out"/memcheck_*.log 2>/dev/null | grep -E "ERROR SUMMARY" | tr '\n' ' ')
  echo "memcheck: ${errors:-no reports written}" >> "$summary"
fi

if ! wants bench; then
  cat "$summary"
  exit 0
fi
timeout 300 "$bin/gpucompute-bench" --json "$out/bench.json" --ceilings_out "$out/ceilings.json" \
  > "$out/bench.log" 2>&1
echo "bench rc=$?" >> "$summary"

# Ceilings from the bench's idle-device measurement, when it wrote them.
ceilings=()
[ -s "$out/ceilings.json" ] && ceilings=(--ceilings="$out/ceilings.json")
# Batching off here (on by default on CUDA): the small rows below run
# unbatched first, then against a batching server.
"$bin/gpucompute-server" --listen=127.0.0.1:50051 --metrics_listen= --max_batch_size=1 \
  "${ceilings[@]}" > "$out/server.log" 2>&1 &
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
