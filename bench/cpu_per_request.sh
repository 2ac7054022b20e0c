#!/usr/bin/env bash
# The server's CPU time and context switches per request, for servers that
# differ in a build or a flag, in alternating rounds. Requests per second
# drift 5-20% from one server start to the next on a shared host; the CPU a
# request costs the server moves less, so it resolves changes of a few
# percent that req/s cannot. Each round starts each server afresh and runs,
# at c=64 (CONCURRENCY) over 8 connections: the 1x1 Transpose, the 64^3
# MatMul inline and the same with resident operands and a kept output.
# While each row runs, `perf stat` counts the server's task-clock and
# context switches for 2 s.
# CONCURRENCY (default 64) sets the calls in flight of every row, e.g. 8 to
# see whether a gap at 8 in flight is the server's work or its cores.
# Needs `perf` on the path (or PERF=...). Logs go to OUT_DIR; one line per
# row and round is printed.
#   bench/cpu_per_request.sh BIN_DIR OUT_DIR ROUNDS LABEL=SERVER[:FLAGS]...
# BIN_DIR holds gpucompute-loadtest. Each server listens on 127.0.0.1:50051.
set -u
usage="usage: cpu_per_request.sh BIN_DIR OUT_DIR ROUNDS LABEL=SERVER[:FLAGS]..."
bin=${1:?$usage}
out=${2:?$usage}
rounds=${3:?$usage}
shift 3
perf=${PERF:-perf}
concurrency=${CONCURRENCY:-64}
mkdir -p "$out"
. "$(dirname "$0")/server_spec.sh"

# label round name loadtest-args...: runs the row, prints its line.
row() {
  local label=$1 round=$2 name=$3 server=$4
  shift 4
  local log=$out/${label}_${round}_$name
  "$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --progress=never --warmup=0.5s \
    --window=0.5s --max_time=5s --stable_windows=100 --connections=8 \
    --concurrency="$concurrency" "$@" > "$log.log" 2>&1 &
  local load=$!
  sleep 2  # past the warm-up and the first windows
  "$perf" stat -x, -e task-clock,context-switches -p "$server" -- sleep 2 2> "$log.stat"
  wait $load
  local rps ms switches
  rps=$(row_rate "$log.log" auto "c=$concurrency")
  ms=$(awk -F, '$3 == "task-clock" { print $1 }' "$log.stat")
  switches=$(awk -F, '$3 == "context-switches" { print $1 }' "$log.stat")
  awk -v l="$label" -v r="$round" -v n="$name" -v rps="${rps:-0}" -v ms="${ms:-0}" \
    -v cs="${switches:-0}" 'BEGIN {
      if (rps <= 0) { printf "%-8s %s %-10s no result (see the log)\n", l, r, n; exit }
      printf "%-8s %s %-10s %8.1fk req/s  %6.1f us CPU/request  %4.2f switches/request\n",
        l, r, n, rps / 1000, ms * 1000 / (rps * 2), cs / (rps * 2) }'
}

specs=("$@")
for round in $(seq 1 "$rounds"); do
  # Each round starts with the next server (A B, B A, ...), so that none
  # holds one place in every round.
  for k in "${!specs[@]}"; do
    spec=${specs[$(((round - 1 + k) % ${#specs[@]}))]}
    start_server "$spec" "$out/${spec%%=*}_${round}.server.log"
    row "$label" "$round" transpose $server --op=transpose --shape=1x1 --variants=auto
    row "$label" "$round" matmul $server --op=matmul --shape=64x64x64 --variants=auto
    row "$label" "$round" kept $server --op=matmul --shape=64x64x64 --variants=auto \
      --placement=tensor
    kill -TERM $server
    wait $server
  done
done
