#!/usr/bin/env bash
# Where a call at one request in flight waits to be run: `perf sched`
# records every core for 1.2 s in the middle of each row, and each group
# of threads (the server's, S:, by the names its threads carry, and the
# load test's and everything else, C:) gets its switches-in (and per call,
# at the row's mean rate), the mean and largest delay from its wake-up to
# running, and its mean sleep and run.
# On a virtual machine an idle core halts, and a thread woken onto it waits
# for the host to run that core again: that wait is this delay. Rows, each
# at one request in flight: the health Check, the 1x1 Transpose, the 64^3
# MatMul inline, and a kept MatMul on resident operands (BIG, default
# 4096x4096x4096 with cuBLAS; e.g. BIG=128x128x128 VARIANT=auto on the CPU
# backend).
# Needs `perf` on the path (or PERF=...) and the right to record scheduler
# events of every core. Logs go to OUT_DIR; the tables are printed.
#   bench/wake_delays.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest.
set -u
usage="usage: wake_delays.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]"
bin=${1:?$usage}
out=${2:?$usage}
shift 2
perf=${PERF:-perf}
mkdir -p "$out"
. "$(dirname "$0")/server_spec.sh"
start_server "server=$bin/gpucompute-server${*:+:$*}" "$out/server.log"
lt=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s
  --max_time=3s --stable_windows=100 --progress=never --concurrency=1)
variant=${VARIANT:-cublas}
recorded_s=1.2
# record AFTER_SECONDS NAME: waits, then records every core for recorded_s.
record() {
  sleep "$1"
  "$perf" sched record -a -o "$out/$2.data" -- sleep $recorded_s > "$out/$2.perf.log" 2>&1
}
# The health Check's row runs first (0-3 s), then the Transpose's (3-6 s).
"${lt[@]}" --op=transpose --shape=1x1 --baseline=grpc > "$out/transpose.log" 2>&1 &
load=$!
record 1.0 health
record 0.9 transpose
wait $load
"${lt[@]}" --op=matmul --shape=64x64x64 > "$out/matmul64.log" 2>&1 &
load=$!
record 1.0 matmul64
wait $load
"${lt[@]}" --op=matmul --shape="${BIG:-4096x4096x4096}" --placement=tensor \
  --variants="$variant" > "$out/kept.log" 2>&1 &
load=$!
record 1.0 kept
wait $load
kill -TERM $server
wait $server

# rate LOG VARIANT: the row's requests per second (a placement in brackets
# after the variant shifts the columns by one).
rate() {
  grep -m1 -E "^$2 " "$out/$1.log" | awk '{ print ($2 ~ /^\[/) ? $5 : $4 }'
}
declare -A rates=([health]=$(rate transpose grpc_health) [transpose]=$(rate transpose auto)
  [matmul64]=$(rate matmul64 auto) [kept]=$(rate kept "$variant"))
for row in health transpose matmul64 kept; do
  echo "== $row: group, switches-in (per call), delay from wake-up to running (mean, max), sleep, run"
  "$perf" sched timehist -i "$out/$row.data" 2> /dev/null |
    awk -v server=$server -v rate="${rates[$row]:-0}" -v seconds=$recorded_s '
    # time cpu name[tid/pid] sleep delay run (ms); the idle task is not a thread
    NR > 3 && $4 ~ /^[0-9.]+$/ && $3 !~ /^<idle>/ {
      name = $3; sub(/\[.*/, "", name); gsub(/[0-9.]+$/, "", name)
      ids = $3; sub(/^[^[]*\[/, "", ids); sub(/\]$/, "", ids)
      n = split(ids, id, "/"); pid = n == 2 ? id[2] : id[1]
      group = (pid == server ? "S:" : "C:") name
      count[group]++; sleep_ms[group] += $4; delay[group] += $5; run[group] += $6
      if ($5 > most[group]) most[group] = $5
    }
    END {
      calls = rate * seconds  # in the time recorded, at the mean rate of the row
      for (g in count) if (count[g] >= 20)
        printf "%-22s %7d (%5s)  delay %6.1f us (max %7.1f)  sleep %8.1f us  run %6.1f us\n", g,
          count[g], (calls > 0 ? sprintf("%.1f", count[g] / calls) : "-"), 1000 * delay[g] / count[g],
          1000 * most[g], 1000 * sleep_ms[g] / count[g], 1000 * run[g] / count[g]
    }' | sort -k2 -nr | head -12
  rm -f "$out/$row.data"
done
echo "== the rows"
grep -m1 -h "^variant" "$out/transpose.log"
grep -hE "^(grpc_health|auto) " "$out/transpose.log" "$out/matmul64.log"
grep -hE "^$variant " "$out/kept.log"
