#!/usr/bin/env bash
# Is the time a call loses after an idle gap spent waking idle cores? The
# same rows three times on one host: as it is (idle); with a spinning
# process of the lowest priority (nice 19) on every core, so that no core
# goes idle and any real thread takes the core at once (spin); and with the
# server's own --keep_cores_awake_us=20000 (flag). Rows, at one request in flight: a
# 1x1 Transpose beside the health Check (back to back), a resident 4096^3
# FP32 MatMul that keeps its output (2.7 ms between calls on an H200), and
# the 1x1 Transpose arriving at 100/s (10 ms gaps); then, idle and flag
# only, the 1x1 Transpose at c=64 over 8 connections beside the health Check
# and ListTensors (what the spinners cost under load). Logs go to OUT_DIR;
# the rows are printed last.
#   bench/awake_cores.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]
set -u
bin=${1:?usage: awake_cores.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
out=${2:?usage: awake_cores.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
shift 2
mkdir -p "$out"
lt() {
  "$bin/gpucompute-loadtest" --server=127.0.0.1:50055 --progress=never --warmup=0.5s \
    --window=1s --max_time=5s "$@"
}
rows() {
  local tag=$1
  shift
  "$bin/gpucompute-server" --listen=127.0.0.1:50055 --metrics_listen= "$@" \
    > "$out/${tag}_server.log" 2>&1 &
  local server=$!
  for _ in $(seq 1 120); do grep -q "listening on" "$out/${tag}_server.log" && break; sleep 0.5; done
  lt --op=transpose --shape=1x1 --concurrency=1 --baseline=grpc > "$out/${tag}_transpose.log" 2>&1
  lt --op=matmul --shape=4096x4096x4096 --placement=tensor --variants=cublas --concurrency=1 \
    > "$out/${tag}_matmul.log" 2>&1
  lt --op=transpose --shape=1x1 --rate=100 > "$out/${tag}_rate100.log" 2>&1
  if [ "$tag" != spin ]; then
    lt --op=transpose --shape=1x1 --concurrency=64 --connections=8 --baseline=grpc,service \
      > "$out/${tag}_c64.log" 2>&1
  fi
  kill -TERM $server
  wait $server
}
rows idle "$@"
spinners=()
for _ in $(seq 1 "$(nproc)"); do
  nice -n 19 bash -c 'while :; do :; done' &
  spinners+=($!)
done
rows spin "$@"
kill "${spinners[@]}"
rows flag --keep_cores_awake_us=20000 "$@"
for tag in idle spin flag; do
  echo "== $tag"
  grep -hE "^(grpc_health|list_tensors|auto|cublas) " "$out/${tag}"_*.log
done
