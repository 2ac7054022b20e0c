#!/usr/bin/env bash
# Profile's hardware counters on a GPU host, in one go: the counters GPU
# test, Profiles through the CLI with and without counters (text and
# --html), and bench/counters_vs_ncu.sh. Logs in OUT_DIR; a short summary
# is printed last.
#   bench/counters_checks.sh BIN_DIR OUT_DIR
# BIN_DIR holds gpucompute-server, gpucompute, gpucompute-counters and
# profile_counters_gpu_test. Each part is bounded (PART_TIMEOUT seconds).
set -u
bin=${1:?usage: counters_checks.sh BIN_DIR OUT_DIR}
out=${2:?usage: counters_checks.sh BIN_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
limit=${PART_TIMEOUT:-110}
mkdir -p "$out"
export GPUCOMPUTE_SERVER_BINARY=$bin/gpucompute-server
summary=$out/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$summary" 2>&1

timeout 40 "$bin/gpucompute-counters" --op=transpose --shape=4096x4096 > "$out/probe.txt" 2>&1
echo "probe rc=$? $(grep -c . "$out/probe.txt") lines" >> "$summary"

timeout "$limit" "$bin/profile_counters_gpu_test" > "$out/gpu_test.log" 2>&1
echo "profile_counters_gpu_test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/gpu_test.log" | tr '\n' ' ')" >> "$summary"
grep -E '^(MatMul 4096|highest)' "$out/gpu_test.log" >> "$summary"

"$bin/gpucompute-server" --backend=cuda --devices=0 --listen=127.0.0.1:50071 --metrics_listen= \
  > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 60); do grep -q listening "$out/server.log" && break; sleep 0.5; done
cli() { timeout 60 "$bin/gpucompute" profile --server=127.0.0.1:50071 "$@"; }
cli --op=transpose --shape=4096x4096 --counters --html="$out/transpose.html" > "$out/cli_transpose.txt" 2>&1
cli --op=reduce --shape=8192x8192 --counters --html="$out/reduce.html" > "$out/cli_reduce.txt" 2>&1
cli --op=matmul --shape=4096x4096x4096 --counters --html="$out/matmul.html" > "$out/cli_matmul.txt" 2>&1
cli --op=reduce --shape=8192x8192 > "$out/cli_reduce_plain.txt" 2>&1
kill "$server"; wait "$server"
grep -E 'ceilings' "$out/server.log" >> "$summary"

timeout "$limit" "$here/counters_vs_ncu.sh" "$bin/gpucompute-counters" "$out/ncu" > "$out/ncu_table.txt" 2>&1
echo "counters_vs_ncu rc=$?" >> "$summary"
grep '^summary' "$out/ncu_table.txt" >> "$summary"
cat "$summary"
