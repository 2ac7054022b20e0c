#!/usr/bin/env bash
# One request in flight: a resident 4096^3 MatMul that keeps its output
# (BF16 and FP32, cuBLAS) and a 1x1 Transpose beside the health Check, over
# TCP and over the server's unix socket, with a sleeping and a busy-polling
# load test. Each row's log goes to OUT_DIR; a table of p50, GPU time,
# server time and transport (and a compute row's way in and out) is
# printed last.
#   bench/one_in_flight.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest.
set -u
bin=${1:?usage: one_in_flight.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
out=${2:?usage: one_in_flight.sh BIN_DIR OUT_DIR [SERVER_FLAGS...]}
shift 2
mkdir -p "$out"
sock=$(mktemp -u /tmp/gpucompute-one-in-flight.XXXXXX)
"$bin/gpucompute-server" --listen=127.0.0.1:50052,unix:"$sock" --metrics_listen= "$@" \
  > "$out/server.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server.log" && break; sleep 0.5; done
lt() { "$bin/gpucompute-loadtest" --progress=never --warmup=0.5s --window=0.5s --max_time=4s "$@"; }
for target in tcp unix; do
  addr=127.0.0.1:50052
  [ $target = unix ] && addr=unix:$sock
  for poll in sleep poll; do
    flags=()
    [ $poll = poll ] && flags=(--busy_poll)
    lt --server="$addr" "${flags[@]}" --op=transpose --shape=1x1 --concurrency=1 \
      --baseline=grpc > "$out/${target}_${poll}_transpose.log" 2>&1
    for dtype in bfloat16 float32; do
      lt --server="$addr" "${flags[@]}" --op=matmul --shape=4096x4096x4096 --dtype=$dtype \
        --placement=tensor --variants=cublas --concurrency=1 \
        > "$out/${target}_${poll}_${dtype}.log" 2>&1
    done
  done
done
kill -TERM $server
wait $server
# Columns counted from the end of a row: transport, batch, srv total, download, compute.
# A compute row's mean way in and out follow (the load test's split of the
# call by the server's received time): a long call's way in grows when the
# server's gRPC threads sleep through it.
for f in "$out"/*_transpose.log "$out"/*_bfloat16.log "$out"/*_float32.log; do
  awk -v f="$(basename "$f" .log)" '
    /^(grpc_health|auto|cublas) / {
      o = ($2 ~ /^\[/)
      line[++n] = sprintf("%-24s %-12s p50 %8s  gpu %8s  srv %8s  transport %8s", f, $1,
        $(8+o) $(9+o), $(NF-11) $(NF-10), $(NF-7) $(NF-6), $(NF-4) $(NF-3))
      name[n] = $1
    }
    /^  / && NF >= 12 && $(NF-8) == "in" && $(NF-2) == "out" {
      ways[$1] = sprintf("  in %8s  out %8s", $(NF-7) $(NF-6), $(NF-1) $NF)
    }
    END { for (i = 1; i <= n; ++i) print line[i] ways[name[i]] }' "$f"
done
