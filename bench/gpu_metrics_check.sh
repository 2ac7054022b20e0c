#!/usr/bin/env bash
# The GPU gauges' targets on a GPU host: the server's utilization gauge
# against nvidia-smi under a saturating MatMul load (within 10 points), the
# time of a /metrics scrape with every series present (<= 20 ms), and
# 64^3 MatMul throughput at c=64 with metrics on (endpoint served, scraped
# every second, GPU gauges sampled) over metrics off (--metrics_listen=
# empty: no endpoint, no sampler) (>= 0.98). Every log goes to OUT_DIR; a
# short table is printed last.
#   bench/gpu_metrics_check.sh BIN_DIR OUT_DIR
# BIN_DIR holds gpucompute-server, gpucompute-loadtest and gpucompute (the
# release preset's build). The server uses GPU 0 (CUDA_DEVICE_ORDER=PCI_BUS_ID,
# so CUDA's 0 is nvidia-smi's 0) and listens on 127.0.0.1:50051, metrics on
# 127.0.0.1:8002 (GRPC_ADDRESS, METRICS_ADDRESS override them); SATURATE_SHAPE,
# SATURATE_SECONDS and ROUNDS override the load's defaults.
set -u
bin=${1:?usage: gpu_metrics_check.sh BIN_DIR OUT_DIR}
out=${2:?usage: gpu_metrics_check.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
shape=${SATURATE_SHAPE:-4096x4096x4096}
seconds=${SATURATE_SECONDS:-40}
rounds=${ROUNDS:-3}
grpc=${GRPC_ADDRESS:-127.0.0.1:50051}
metrics=${METRICS_ADDRESS:-127.0.0.1:8002}
export CUDA_DEVICE_ORDER=PCI_BUS_ID
summary=$out/summary.txt
: > "$summary"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 >> "$summary" 2>&1
lt=("$bin/gpucompute-loadtest" --server=$grpc --progress=never)

# Starts the server with the flags given, logging to $out/server_$1.log.
start_server() {
  local label=$1
  shift
  "$bin/gpucompute-server" --listen=$grpc --devices=0 "$@" > "$out/server_$label.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    grep -q "listening on" "$out/server_$label.log" && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.5
  done
  echo "server ($label) did not start: see $out/server_$label.log" | tee -a "$summary"
  exit 1
}
stop_server() {
  kill -TERM "$server"
  wait "$server"
}
# requests_per_s of the CSV's first row.
req_per_s() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "requests_per_s") c = i }
                       NR == 2 { print $c }' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# ---- 1 and 2: utilization against nvidia-smi; scrape time, all series ----
start_server gauges --metrics_listen=$metrics --gpu_metrics_interval_ms=1000
"$bin/gpucompute" info --server=$grpc > "$out/info.txt" 2>&1
# Operands held on the server (--placement=tensor): inline 4096^2 operands
# spent the run on the wire and left the GPU 5-8% busy.
"${lt[@]}" --op=matmul --shape="$shape" --variants=auto --placement=tensor --concurrency=16 --warmup=3s \
  --window=1s --stable_windows=1000 --max_time="$((seconds + 5))s" \
  --csv="$out/saturate.csv" > "$out/saturate.log" 2>&1 &
load=$!
sleep 8  # warm-up and a few samplings under load
samples=$out/utilization.csv
echo "t,server_percent,nvidia_smi_percent,abs_diff" > "$samples"
for t in $(seq 1 "$((seconds - 10))"); do
  server_ratio=$(curl -s "http://$metrics/metrics" |
    awk '/^gpucompute_gpu_utilization_ratio\{device="cuda:0"\}/ { print $2 }')
  smi=$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -i 0 | tr -d ' ')
  if [ -n "$server_ratio" ] && [ -n "$smi" ]; then
    awk -v t="$t" -v s="$server_ratio" -v n="$smi" \
      'BEGIN { p = s * 100; d = p - n; if (d < 0) d = -d; printf "%d,%.1f,%s,%.1f\n", t, p, n, d }' >> "$samples"
  else
    echo "$t,${server_ratio:-absent},${smi:-absent}," >> "$samples"
  fi
  sleep 1
done
# Scrape time with every series present (request series of the load, GPU gauges).
curl -s "http://$metrics/metrics" > "$out/scrape.txt"
for _ in $(seq 1 50); do
  curl -s -o /dev/null -w '%{time_total}\n' "http://$metrics/metrics"
done > "$out/scrape_seconds.txt"
wait "$load"
stop_server
series=$(grep -vc '^#' "$out/scrape.txt")
gpu_series=$(grep -c '^gpucompute_gpu_' "$out/scrape.txt")
mean_diff=$(awk -F, 'NR > 1 && $4 != "" { s += $4; n++ } END { if (n) printf "%.1f", s / n; else print "n/a" }' "$samples")
max_diff=$(awk -F, 'NR > 1 && $4 != "" { if ($4 > m) m = $4; n++ } END { if (n) printf "%.1f", m; else print "n/a" }' "$samples")
mean_server=$(awk -F, 'NR > 1 && $4 != "" { s += $2; n++ } END { if (n) printf "%.1f", s / n }' "$samples")
mean_smi=$(awk -F, 'NR > 1 && $4 != "" { s += $3; n++ } END { if (n) printf "%.1f", s / n }' "$samples")
scrape_median_ms=$(median < "$out/scrape_seconds.txt" | awk '{ printf "%.2f", $1 * 1000 }')
scrape_max_ms=$(sort -g "$out/scrape_seconds.txt" | tail -1 | awk '{ printf "%.2f", $1 * 1000 }')

# ---- 3: throughput, metrics on against off, alternating rounds ----
row() {
  local label=$1 round=$2
  "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=64 --warmup=2s \
    --window=1s --stable_windows=5 --max_time=30s --csv="$out/tput_${label}_$round.csv" \
    > "$out/tput_${label}_$round.log" 2>&1
  req_per_s "$out/tput_${label}_$round.csv" >> "$out/tput_$label.txt"
}
: > "$out/tput_on.txt"
: > "$out/tput_off.txt"
for round in $(seq 1 "$rounds"); do
  start_server "on_$round" --metrics_listen=$metrics --gpu_metrics_interval_ms=1000
  (while kill -0 "$server" 2>/dev/null; do
    curl -s -o /dev/null "http://$metrics/metrics"
    sleep 1
  done) &
  scraper=$!
  row on "$round"
  stop_server
  wait "$scraper" 2>/dev/null
  start_server "off_$round" --metrics_listen=
  row off "$round"
  stop_server
done
on=$(median < "$out/tput_on.txt")
off=$(median < "$out/tput_off.txt")
ratio=$(awk -v a="$on" -v b="$off" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')

{
  echo
  echo "check                                    measured                 target"
  printf '%-40s %-24s %s\n' "utilization |server - nvidia-smi|" "mean $mean_diff, max $max_diff pts" "<= 10 points"
  printf '%-40s %-24s %s\n' "  (means: server / nvidia-smi)" "$mean_server / $mean_smi %" ""
  printf '%-40s %-24s %s\n' "scrape time, $series lines ($gpu_series GPU)" "median $scrape_median_ms ms, max $scrape_max_ms" "<= 20 ms"
  printf '%-40s %-24s %s\n' "64^3 MatMul c=64 req/s on / off" "$on / $off = $ratio" ">= 0.98"
} | tee -a "$summary"
