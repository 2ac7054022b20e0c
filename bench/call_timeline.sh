#!/usr/bin/env bash
# Where one call's time goes, across the client, the sockets and the server:
# a system-wide `perf record` of socket reads and writes and of the
# scheduler, for 0.4 s of a row at one request in flight, cut into spans by
# call_timeline.py. Two rows by default, each over the server's unix socket
# with a busy-polling client: the health Check (the floor) and a resident
# FP32 4096^3 MatMul keeping its output (cuBLAS, 2.7 ms on an H200). Needs
# `perf` with tracepoint access (root, or PERF=...).
#   bench/call_timeline.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest.
set -u
bin=${1:?usage: call_timeline.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
out=${2:?usage: call_timeline.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
shift 2
perf=${PERF:-perf}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
sock=$(mktemp -u /tmp/gpucompute-timeline.XXXXXX)
"$bin/gpucompute-server" --listen=127.0.0.1:50056,unix:"$sock" --metrics_listen= "$@" \
  > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server.log" && break; sleep 0.5; done
timeline() {  # name, loadtest args...
  local name=$1
  shift
  "$bin/gpucompute-loadtest" --server=unix:"$sock" --busy_poll --progress=never --warmup=0.5s \
    --window=0.5s --max_time=4s --stable_windows=100 --concurrency=1 "$@" \
    > "$out/$name.loadtest.log" 2>&1 &
  local load=$!
  sleep 2.5
  "$perf" record -a -e sched:sched_switch -e sched:sched_wakeup -e syscalls:sys_enter_sendmsg \
    -e syscalls:sys_exit_recvmsg -o "$out/$name.perf.data" -- sleep 0.4 > /dev/null 2>&1
  wait $load
  "$perf" script -i "$out/$name.perf.data" -F comm,pid,tid,cpu,time,event,trace \
    > "$out/$name.timeline.txt" 2> /dev/null
  echo "== $name"
  python3 "$here/call_timeline.py" "$out/$name.timeline.txt" $load $server
}
timeline health --op=transpose --shape=1x1 --baseline=grpc  # recorded while the baseline row runs
timeline matmul_4096_kept --op=matmul --shape=4096x4096x4096 --dtype=float32 \
  --placement=tensor --variants=cublas
kill -TERM $server
wait $server
rm -f "$sock"
