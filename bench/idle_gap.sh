#!/usr/bin/env bash
# Does a call cost more after the server and client sat idle? The health
# Check and a 1x1 Transpose, back to back (closed loop, one in flight) and
# then arriving at open-loop rates whose mean gaps run from 10 ms down to
# 0.1 ms, on one server. If the p50 climbs as the gaps grow, the time goes
# to waking idle threads (and, on a virtual machine, their idle vCPUs), not
# to work done per call. Logs go to OUT_DIR; the rows are printed last.
#   [LOADTEST_FLAGS=--busy_poll] bench/idle_gap.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest.
set -u
bin=${1:?usage: idle_gap.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
out=${2:?usage: idle_gap.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
shift 2
mkdir -p "$out"
"$bin/gpucompute-server" --listen=127.0.0.1:50053 --metrics_listen= "$@" > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server.log" && break; sleep 0.5; done
lt() {
  "$bin/gpucompute-loadtest" --server=127.0.0.1:50053 --progress=never --warmup=0.5s \
    --window=1s --max_time=5s --op=transpose --shape=1x1 --baseline=grpc ${LOADTEST_FLAGS:-} "$@"
}
lt --concurrency=1 > "$out/closed.log" 2>&1
for rate in 100 1000 10000; do lt --rate=$rate > "$out/rate_$rate.log" 2>&1; done
kill -TERM $server
wait $server
for f in "$out"/closed.log "$out"/rate_*.log; do
  echo "== $(basename "$f" .log)"
  grep -E "^ *(row|grpc_health|auto)" "$f"
done
