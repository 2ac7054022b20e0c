#!/usr/bin/env bash
# Where a resident request's time goes at one request in flight, on a GPU
# host: the resident MatMul rows of tensor_checks.sh (and a 1x1 inline
# Transpose, the smallest compute call) against servers whose workers poll
# for the next request for 0, 250 and 1000 us (--worker_spin_us), each from
# a client that sleeps while it waits and from one that polls (--busy_poll).
# What the two polls remove is the wake-up of a sleeping thread on each side.
#   bench/latency_probe.sh BIN_DIR OUT_DIR [extra server flags...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest; each server
# listens on 127.0.0.1:50051 in turn. Environment: VARIANT (default cublas),
# BIG (default 4096) as in tensor_checks.sh, SPINS (default "0 250 1000").
set -u
bin=${1:?usage: latency_probe.sh BIN_DIR OUT_DIR [extra server flags...]}
out=${2:?usage: latency_probe.sh BIN_DIR OUT_DIR [extra server flags...]}
shift 2
big=${BIG:-4096}
variant=${VARIANT:-cublas}
spins=${SPINS:-0 250 1000}
mkdir -p "$out"
lt=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s --concurrency=1)

for spin in $spins; do
  "$bin/gpucompute-server" --listen=127.0.0.1:50051 --metrics_listen= --worker_spin_us="$spin" "$@" \
    > "$out/server_spin$spin.log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do grep -q "listening on" "$out/server_spin$spin.log" && break; sleep 0.5; done
  for busy_poll in false true; do
    f=$out/rows_spin${spin}_busy_poll_$busy_poll.log
    "${lt[@]}" --busy_poll=$busy_poll --op=matmul --shape="${big}x${big}x${big}" --variants="$variant" \
      --placement=tensor --max_time=5s > "$f" 2>&1
    "${lt[@]}" --busy_poll=$busy_poll --op=matmul --shape=64x64x64 --variants="$variant",auto \
      --placement=tensor --baseline=grpc,service --max_time=4s >> "$f" 2>&1
    "${lt[@]}" --busy_poll=$busy_poll --op=transpose --shape=1x1 --variants=auto --placement=inline \
      --max_time=3s >> "$f" 2>&1
  done
  kill -TERM "$server"
  wait "$server"
done
for spin in $spins; do
  for busy_poll in false true; do
    echo "== --worker_spin_us=$spin, client --busy_poll=$busy_poll"
    grep -E " c=[0-9]+ " "$out/rows_spin${spin}_busy_poll_$busy_poll.log"
  done
done
