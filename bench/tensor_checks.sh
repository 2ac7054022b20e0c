#!/usr/bin/env bash
# Tensors held on the server, on a GPU host: the rows behind the tensor
# targets of bench/RESULTS.md, in one go. Every log goes to OUT_DIR; the
# figures are printed last, each beside its reference from the same run.
#   bench/tensor_checks.sh BIN_DIR OUT_DIR [extra server flags...]
# BIN_DIR holds gpucompute-server and gpucompute-loadtest. The server listens
# on 127.0.0.1:50051 while the rows run. Environment:
#   SIDE     side of the square FP32 tensor uploaded and downloaded
#            (default 32768: 4 GiB)
#   BIG      the large MatMul's m=n=k (default 4096)
#   VARIANT  the MatMul variant timed (default cublas; cpu_reference with
#            --backend=cpu)
set -u
bin=${1:?usage: tensor_checks.sh BIN_DIR OUT_DIR [extra server flags...]}
out=${2:?usage: tensor_checks.sh BIN_DIR OUT_DIR [extra server flags...]}
shift 2
side=${SIDE:-32768}
big=${BIG:-4096}
variant=${VARIANT:-cublas}
mkdir -p "$out"
log=$out/tensors.log
: > "$log"

"$bin/gpucompute-server" --listen=127.0.0.1:50051 --metrics_listen= "$@" \
  > "$out/server_tensors.log" 2>&1 &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$out/server_tensors.log" && break; sleep 0.5; done
lt=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s)

# MatMul on resident operands with the output kept, beside the same call
# inline; at 64^3 also beside the no-op gRPC calls and the gRPC echo of the
# inline call's own bytes. Each twice: from a client that sleeps while it
# waits, and from one that polls (--busy_poll).
for busy_poll in false true; do
  echo "== client --busy_poll=$busy_poll" >> "$log"
  "${lt[@]}" --busy_poll=$busy_poll --op=matmul --shape="${big}x${big}x${big}" --variants="$variant" \
    --placement=inline,tensor --concurrency=1 --max_time=10s >> "$log" 2>&1
  "${lt[@]}" --busy_poll=$busy_poll --op=matmul --shape=64x64x64 --variants="$variant",auto \
    --placement=inline,tensor --concurrency=1 --baseline=grpc,service,echo --max_time=4s \
    >> "$log" 2>&1
done

# Inline requests (no tensors), which holding tensors must leave within
# noise, beside the no-op gRPC call and the gRPC echo of the same bytes.
"${lt[@]}" --op=matmul --shape=1024x1024x1024 --variants=auto --concurrency=1,8 \
  --max_time=8s >> "$log" 2>&1
for conns in 1 8; do
  "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=64 --connections=$conns \
    --baseline=grpc,echo --max_time=8s >> "$log" 2>&1
done

# Upload and Download streams beside a TCP echo of the same bytes, the
# server's resident size sampled every 0.1 s while the uploads run.
rss() { awk '/VmRSS/{print $2}' "/proc/$server/status"; }
echo "server VmRSS before the uploads (KiB): $(rss)" >> "$log"
peak_file=$out/rss_peak_kib.txt
rss > "$peak_file"
(
  peak=$(cat "$peak_file")
  while kill -0 "$server" 2>/dev/null; do
    r=$(rss) || break
    [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r && echo "$peak" > "$peak_file"
    sleep 0.1
  done
) &
sampler=$!
"${lt[@]}" --op=upload --shape="${side}x${side}" --concurrency=1 --warmup=1s --window=6s \
  --min_requests=3 --max_time=30s >> "$log" 2>&1
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
echo "server VmRSS peak during the uploads (KiB): $(cat "$peak_file")" >> "$log"
"${lt[@]}" --op=download --shape="${side}x${side}" --concurrency=1 --warmup=1s --window=6s \
  --min_requests=3 --max_time=30s >> "$log" 2>&1

kill -TERM "$server"
wait "$server"
echo "server exit rc=$?" >> "$log"
grep -E " c=[0-9]+ |VmRSS|exit rc|gpucompute-loadtest:|^grpc_echo server:|^== " "$log"
