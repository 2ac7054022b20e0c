#!/usr/bin/env bash
# Server-side batching under load: for each --batch_delay_us in DELAYS, a
# fresh server and one load-test run of 64x64x64 MatMul at concurrency 1, 8
# and 64 over 1 and 8 connections, beside the no-op gRPC floor, its rows
# labelled delay=<N>us; then every run merged into OUT_DIR/batching.html
# (and batching.csv) and the merged table printed.
#   bench/batching_sweep.sh SERVER_BIN LOADTEST_BIN OUT_DIR [extra server flags...]
# e.g. bench/batching_sweep.sh build/server/gpucompute-server \
#        build/client/loadtest/gpucompute-loadtest /tmp/batching --backend=cpu
# Each server listens on a free loopback port, without a metrics port. Logs
# and each run's JSON (delay<N>.json) go to OUT_DIR. Environment:
#   DELAYS         --batch_delay_us values, microseconds (default "0 50 200")
#   MAX_BATCH_SIZE the servers' --max_batch_size (default 16, as a CUDA
#                  server's default; the CPU backend's default is off)
#   WARMUP WINDOW MAX_TIME STABLE_WINDOWS   the load test's --warmup,
#                  --window, --max_time and --stable_windows per row
#                  (default 0.5s, 0.5s, 10s, 3)
#   START_TIMEOUT  seconds a server has to start serving (default 120)
set -euo pipefail
usage="usage: bench/batching_sweep.sh SERVER_BIN LOADTEST_BIN OUT_DIR [extra server flags...]"
server_bin=${1:?$usage}
loadtest_bin=${2:?$usage}
out=${3:?$usage}
shift 3
extra=("$@")
delays=${DELAYS:-0 50 200}
max_batch_size=${MAX_BATCH_SIZE:-16}
warmup=${WARMUP:-0.5s} window=${WINDOW:-0.5s} max_time=${MAX_TIME:-10s}
stable_windows=${STABLE_WINDOWS:-3}
start_timeout=${START_TIMEOUT:-120}
case $out in
  *,*) echo "batching_sweep.sh: OUT_DIR must not contain a comma (--merge_json splits on them)" >&2
       exit 2 ;;
esac
mkdir -p "$out"

server_pid=
stop_server() {  # SIGTERM drains the server; wait for its exit
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT

jsons=()
for delay in $delays; do
  log=$out/server_delay$delay.log
  # Made here, not by the background job's redirection, which may come after
  # the first read below (sed would fail on a missing file, and end the script).
  : > "$log"
  # Port 0: the kernel picks a free port and the server prints the one it
  # bound once it serves ("gpucompute-server listening on 127.0.0.1:PORT").
  "$server_bin" --listen=127.0.0.1:0 --metrics_listen= --max_batch_size="$max_batch_size" \
    --batch_delay_us="$delay" \
    ${extra[@]+"${extra[@]}"} > "$log" 2>&1 &
  server_pid=$!
  port=
  for _ in $(seq $((start_timeout * 5))); do
    port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break  # it exited: a bad flag, no device
    sleep 0.2
  done
  if [ -z "$port" ]; then
    echo "batching_sweep.sh: the server with --batch_delay_us=$delay is not serving; $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  json=$out/delay$delay.json
  rc=0
  "$loadtest_bin" --server="127.0.0.1:$port" --op=matmul --shape=64x64x64 --variants=auto \
    --concurrency=1,8,64 --connections=1,8 --baseline=grpc --label="delay=${delay}us" \
    --warmup="$warmup" --window="$window" --max_time="$max_time" \
    --stable_windows="$stable_windows" --progress=never \
    --json="$json" > "$out/loadtest_delay$delay.log" 2>&1 || rc=$?
  stop_server
  # 1: some row had no successful request (its errors are in the JSON).
  if [ "$rc" -ne 0 ] && { [ "$rc" -ne 1 ] || [ ! -s "$json" ]; }; then
    echo "batching_sweep.sh: the load test against --batch_delay_us=$delay failed (exit $rc):" >&2
    tail -n 20 "$out/loadtest_delay$delay.log" >&2
    exit 1
  fi
  [ "$rc" -eq 0 ] || echo "batching_sweep.sh: delay=${delay}us: a row had no successes" >&2
  echo "delay=${delay}us: $json"
  jsons+=("$json")
done

[ ${#jsons[@]} -gt 0 ] || { echo "batching_sweep.sh: DELAYS is empty" >&2; exit 2; }
echo
"$loadtest_bin" --merge_json="$(IFS=,; echo "${jsons[*]}")" --html="$out/batching.html" \
  --csv="$out/batching.csv"
