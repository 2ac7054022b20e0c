#!/usr/bin/env bash
# Where a host's cores go while small requests run at c=64 over 8
# connections: the whole host's busy cores, the server's and the load
# test's, each by thread name, for the floors and the op rows alike (the
# echo floor is served in the load test's process, so its row shows that
# process's threads doing both ends). It tells a host whose every core is
# busy, where any CPU the server saves is a rate gained, from one with
# cores to spare, where the rate is held by something that serializes.
# Every log goes to OUT_DIR; a table per server is printed last.
#   bench/host_cores.sh BIN_DIR OUT_DIR LABEL=SERVER[:FLAGS]...
# BIN_DIR holds gpucompute-loadtest. Each server listens on LISTEN
# (127.0.0.1:50051 unless set; port 0 takes a free one) in turn. Each row
# runs ROW_SECONDS (5) and is sampled from 2/5 of it for 2/5 of it (/proc,
# no perf needed). CONNECTIONS (8) sets the rows' connections: a row held by
# what one connection serializes moves with it, one held by the host's or
# a process's cores does not. LOAD_THREADS, where set, is the load test's
# --load_threads (e.g. as many as CONNECTIONS: one thread per connection).
# Each row also gives a call's mean latency and the part of it the server
# measured from the call's arrival to its answer: in a closed loop the rate
# is the calls in flight over the latency, so the two say whether the
# server's own time or the transport around it holds a row.
# With PERF set (a perf binary that may record every CPU: root), each row
# is also sampled host-wide by `perf record -a` over the same window, and
# each process's CPU per request is split by library and by function
# (cpu_by_function.py), so that two rows' costs compare line by line.
set -u
usage="usage: host_cores.sh BIN_DIR OUT_DIR LABEL=SERVER[:FLAGS]..."
bin=${1:?$usage}
out=${2:?$usage}
shift 2
mkdir -p "$out"
. "$(dirname "$0")/server_spec.sh"
summary=$out/summary.txt
: > "$summary"
row_seconds=${ROW_SECONDS:-5}
connections=${CONNECTIONS:-8}
load_threads=()
[ -n "${LOAD_THREADS:-}" ] && load_threads=(--load_threads="$LOAD_THREADS")
sample_at=$(awk -v s="$row_seconds" 'BEGIN { print s * 0.4 }')
window=$(awk -v s="$row_seconds" 'BEGIN { print s / 10 }')

# Busy cores over SECONDS from the clock time START (seconds since the
# epoch; the sampler waits for it, so that its own start-up on a loaded
# host does not push the window past the row's end): the host's, then each
# PID's by thread name (digits dropped, so worker0.3 and worker0.5 count
# together), one line each: "host 11.8 of 16",
# "PID 6.12 nexting_thread=5.70 worker=0.31 ...".
sample() {
  python3 - "$@" <<'PY'
import os, re, sys, time
start, seconds, pids = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
tick = os.sysconf("SC_CLK_TCK")
def host():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]  # idle, iowait
    return sum(f[:8]) - idle  # user nice system idle iowait irq softirq steal
def threads(pid):
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # the process has ended
        return out
    for tid in tids:
        try:
            s = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        out[tid] = (name, int(fields[11]) + int(fields[12]))  # utime + stime
    return out
time.sleep(max(0.0, start - time.time()))
h0, t0, c0 = host(), {p: threads(p) for p in pids}, time.monotonic()
time.sleep(seconds)
h1, t1 = host(), {p: threads(p) for p in pids}
seconds = time.monotonic() - c0  # as long as the window really was
print(f"host {(h1 - h0) / tick / seconds:.2f} of {os.cpu_count()}")
for p in pids:
    groups = {}
    for tid, (name, ticks) in t1[p].items():
        before = t0[p].get(tid, (name, 0))[1]
        key = re.sub(r"[0-9.]+$", "", name) or name
        groups[key] = groups.get(key, 0.0) + (ticks - before) / tick / seconds
    total = sum(groups.values())
    parts = " ".join(f"{k}={v:.2f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])
                     if v >= 0.01)
    print(f"{p} {total:.2f} {parts}")
PY
}

# "RATE MEAN SERVER" of a load-test row's line (row_line) on stdin: its
# req/s, then in microseconds its mean latency and the server's own time
# ("-" for a floor, which reports none).
row_figures() {
  awk '
    function us(v, unit) { return unit == "ms" ? v * 1000 : unit == "s" ? v * 1e6 : v }
    {
      for (i = 1; i <= NF; ++i) if ($i == "|") break
      srv = ($(i + 9) ~ /^[0-9.]+$/) ? sprintf("%.0f", us($(i + 9), $(i + 10))) : "-"
      printf "%s %.0f %s\n", $4, us($6, $7), srv
    }'
}

# One row: the load test with ARGS, sampled as said above; prints
# "NAME req/s host server-cores load-cores srv-us host-us mean-us in-server-us"
# and the thread groups.
row() {
  local name=$1 row_name=$2
  shift 2
  local log=$out/${label}_$name
  "$bin/gpucompute-loadtest" --server="$target" --progress=never --warmup="${sample_at}s" \
    --window="${window}s" --max_time="${row_seconds}s" --stable_windows=100 \
    --connections="$connections" "${load_threads[@]}" --concurrency=64 "$@" > "$log.log" 2>&1 &
  local load=$!
  local from
  from=$(awk -v now="$(date +%s.%N)" -v s="$sample_at" 'BEGIN { printf "%.3f", now + s }')
  sample "$from" "$sample_at" "$server" "$load" > "$log.cores" 2>&1 &
  local sampler=$!
  sleep "$sample_at"
  local recorder=
  if [ -n "${PERF:-}" ]; then
    "$PERF" record -a -F 997 -o "$log.perf.data" -- sleep "$sample_at" > /dev/null 2>&1 &
    recorder=$!
  fi
  wait "$sampler"
  [ -n "$recorder" ] && wait "$recorder"
  wait $load
  local rps mean in_server
  read -r rps mean in_server < <(row_line "$log.log" "$row_name" c=64 | row_figures)
  if [ -n "$recorder" ] && [ "${rps:-0}" != 0 ]; then
    python3 "$(dirname "$0")/cpu_by_function.py" "$PERF" "$log.perf.data" 997 "$rps" \
      "server=$server" "loadtest=$load" > "$log.functions.txt" 2>&1
  fi
  awk -v n="$name" -v rps="${rps:-0}" -v s="$server" -v l="$load" -v mean="${mean:--}" \
    -v in_server="${in_server:--}" '
    $1 == "host" { host = $2; cores = $4 }
    $1 == s { srv = $2; sg = $0; sub(/^[^ ]+ [^ ]+ ?/, "", sg) }
    $1 == l { ld = $2; lg = $0; sub(/^[^ ]+ [^ ]+ ?/, "", lg) }
    END {
      if (rps <= 0) { printf "%-10s no result (see %s)\n", n, FILENAME; exit }
      printf "%-10s %8.1fk %6.2f of %-3s %6.2f %6.2f %7.1f %7.1f %7s %7s\n", n, rps / 1000, host,
        cores, srv, ld, srv * 1e6 / rps, host * 1e6 / rps, mean, in_server
      printf "%-10s   server: %s\n%-10s   load test: %s\n", "", sg, "", lg
    }' "$log.cores"
}

status=0
for spec in "$@"; do
  start_server "$spec" "$out/${spec%%=*}.server.log"
  if [ -z "$target" ]; then
    echo "host_cores.sh: $label is not serving (see $out/$label.server.log)" | tee -a "$summary"
    kill -TERM "$server" 2> /dev/null
    wait "$server"
    status=1
    continue
  fi
  {
    echo "$label: cores busy while each row runs at c=64 over $connections connections${LOAD_THREADS:+, $LOAD_THREADS load threads}"
    printf "%-10s %9s %13s %6s %6s %7s %7s %7s %7s\n" row req/s host server load \
      "srv us" "host us" mean "in srv"
    row health grpc_health --op=transpose --shape=1x1 --variants=auto --baseline=grpc
    row transpose auto --op=transpose --shape=1x1 --variants=auto
    row echo grpc_echo --op=matmul --shape=64x64x64 --variants=auto --baseline=echo
    row matmul auto --op=matmul --shape=64x64x64 --variants=auto
    row kept auto --op=matmul --shape=64x64x64 --variants=auto --placement=tensor
    echo "(srv us, host us: the server's and the whole host's CPU per request;"
    echo " mean, in srv: a call's mean latency and the server's own part of it, us)"
  } | tee -a "$summary"
  kill -TERM "$server"
  wait "$server"
done
exit $status
