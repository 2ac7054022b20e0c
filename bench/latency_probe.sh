#!/usr/bin/env bash
# Where a small or resident request's time goes beyond the server's own
# total_us, on a GPU host: the resident MatMul rows of tensor_checks.sh run
# twice, as the host is and while this script holds /dev/cpu_dma_latency at
# 0 (no deep CPU idle states: the wake-up latency of sleeping threads drops
# out), then one second of the 4096^3 resident row under strace on both
# sides, for the thread hand-offs and waits of each call in order.
#   bench/latency_probe.sh BIN_DIR OUT_DIR [extra server flags...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest, and strace when
# the host has none. Holding /dev/cpu_dma_latency needs root; without it
# the second pass is skipped and says so. Environment: VARIANT (default
# cublas), BIG (default 4096) as in tensor_checks.sh.
set -u
bin=${1:?usage: latency_probe.sh BIN_DIR OUT_DIR [extra server flags...]}
out=${2:?usage: latency_probe.sh BIN_DIR OUT_DIR [extra server flags...]}
shift 2
big=${BIG:-4096}
variant=${VARIANT:-cublas}
mkdir -p "$out"
strace_bin=$(command -v strace || echo "$bin/strace")

"$bin/gpucompute-server" --listen=127.0.0.1:50051 --metrics_listen= "$@" \
  > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server.log" && break; sleep 0.5; done
lt=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s)
rows() {
  "${lt[@]}" --op=matmul --shape="${big}x${big}x${big}" --variants="$variant" --placement=tensor \
    --concurrency=1 --max_time=6s
  "${lt[@]}" --op=matmul --shape=64x64x64 --variants="$variant",auto --placement=inline,tensor \
    --concurrency=1 --baseline=grpc --max_time=4s
}
rows > "$out/rows.log" 2>&1

# The same rows with the CPUs kept out of deep idle states for as long as
# the file stays open (the kernel's PM QoS interface).
if exec 3> /dev/cpu_dma_latency 2>/dev/null; then
  printf '0x00000000' >&3
  rows > "$out/rows_no_deep_idle.log" 2>&1
  exec 3>&-
else
  echo "cannot open /dev/cpu_dma_latency (not root?): pass skipped" > "$out/rows_no_deep_idle.log"
fi

if [ -x "$strace_bin" ]; then
  "$strace_bin" -f -tt -T -o "$out/strace_server.txt" -p "$server" &
  tracer=$!
  sleep 1
  "$strace_bin" -f -tt -T -o "$out/strace_client.txt" "${lt[@]}" --op=matmul \
    --shape="${big}x${big}x${big}" --variants="$variant" --placement=tensor --concurrency=1 \
    --warmup=0.2s --max_time=1s > "$out/strace_row.log" 2>&1
  kill "$tracer"
  wait "$tracer" 2>/dev/null
else
  echo "no strace: timeline skipped" > "$out/strace_row.log"
fi

kill -TERM "$server"
wait "$server"
for f in rows rows_no_deep_idle; do
  echo "== $f"
  grep -E " c=[0-9]+ |skipped" "$out/$f.log"
done
