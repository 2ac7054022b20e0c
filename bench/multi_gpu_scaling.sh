#!/usr/bin/env bash
# Throughput of a compute-bound load on one GPU and on all GPUs of the host,
# through the real server: CONCURRENCY clients each send ROUNDS Profile
# requests (MatMul SIZE^3 FP32 on server-generated data, cuBLAS, REPS timed
# runs), so no payload crosses the network and the GPUs do the work.
# Usage: bench/multi_gpu_scaling.sh SERVER_BINARY CLI_BINARY [CONCURRENCY] [ROUNDS] [SIZE] [REPS]
set -euo pipefail
server=$1 cli=$2 concurrency=${3:-8} rounds=${4:-2} size=${5:-8192} reps=${6:-50}

run() {  # $1: --devices value; prints requests per second
  local log port pid start end
  log=$(mktemp)
  "$server" --listen=127.0.0.1:0 --backend=cuda --devices="$1" >"$log" 2>"$log.err" &
  pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.2
  done
  [ -n "$port" ] || { cat "$log.err" >&2; kill "$pid"; return 1; }
  start=$(date +%s.%N)
  for c in $(seq "$concurrency"); do
    (for _ in $(seq "$rounds"); do
       "$cli" profile --server "127.0.0.1:$port" --op matmul --shape "${size}x${size}x${size}" \
         --variants cublas --warmup 2 --repetitions "$reps" >/dev/null
     done) &
  done
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null || true
  end=$(date +%s.%N)
  kill -TERM "$pid"
  wait "$pid" || true
  rm -f "$log" "$log.err"
  awk -v n=$((concurrency * rounds)) -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", n / (e - s) }'
}

gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
one=$(run 0)
all=$(run all)
printf '%-28s %s\n' "GPUs on the host" "$gpus" \
  "requests/s on GPU 0" "$one" \
  "requests/s on all GPUs" "$all" \
  "ratio all / one" "$(awk -v a="$all" -v o="$one" 'BEGIN { printf "%.2f", a / o }')"
