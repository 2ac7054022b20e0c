#!/usr/bin/env bash
# Small requests at c=64 on a GPU host: the rows of the small-request targets
# beside the same run's floors, and what the server spends per request while
# one row runs (a 1x1 Transpose over 8 connections unless PROFILE_ROW and
# CONNECTIONS say otherwise): cores busy and context switches
# and futex calls per request (perf stat), on-CPU time per thread and per
# function (perf record), where threads go to sleep (sched_switch call
# chains: the off-CPU picture), and whose locks the futex calls are
# (futex_callers.py). Every log goes to OUT_DIR; a short table is printed
# last.
#   bench/small_request_profile.sh BIN_DIR OUT_DIR LABEL=SERVER[:FLAGS]...
# e.g. before=BIN/gpucompute-server-old after=BIN/gpucompute-server
#      cpu=BIN/gpucompute-server:--backend=cpu
# BIN_DIR holds gpucompute-loadtest and, where it is on the machine, perf
# (PERF overrides; without perf, only the rows run). Each server listens on
# 127.0.0.1:50051 in turn.
# PROFILE_ROW picks the profiled row: transpose (the 1x1 Transpose, the
# default), matmul (the 64^3 MatMul inline) or kept (the same on resident
# operands, its output kept); CONNECTIONS (8) its connections and those of
# the rows' many-connection runs, so that one row can be profiled over 8
# connections and over 16 to see what a connection serializes.
set -u
bin=${1:?usage: small_request_profile.sh BIN_DIR OUT_DIR LABEL=SERVER[:FLAGS]...}
out=${2:?usage: small_request_profile.sh BIN_DIR OUT_DIR LABEL=SERVER[:FLAGS]...}
shift 2
mkdir -p "$out"
. "$(dirname "$0")/server_spec.sh"
perf=${PERF:-$bin/perf}
summary=$out/summary.txt
: > "$summary"
conns_many=${CONNECTIONS:-8}
case ${PROFILE_ROW:-transpose} in
  transpose) profiled=(--op=transpose --shape=1x1) ;;
  matmul) profiled=(--op=matmul --shape=64x64x64) ;;
  kept) profiled=(--op=matmul --shape=64x64x64 --placement=tensor) ;;
  *)
    echo "small_request_profile.sh: PROFILE_ROW is transpose, matmul or kept, not $PROFILE_ROW" >&2
    exit 2
    ;;
esac
lt=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s
  --max_time=4s)

for spec in "$@"; do
  start_server "$spec" "$out/server_${spec%%=*}.log"
  log=$out/rows_$label.log

  # The rows, over 1 and 8 (CONNECTIONS) connections, beside the health
  # Check, ListTensors and a gRPC echo of the MatMul's own bytes; the
  # resident MatMul keeps its output.
  for conns in 1 "$conns_many"; do
    "${lt[@]}" --op=transpose --shape=1x1 --variants=auto --concurrency=64 --connections=$conns \
      --baseline=grpc,service >> "$log" 2>&1
    "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=1,8,64 \
      --connections=$conns --placement=inline,tensor --baseline=echo >> "$log" 2>&1
  done
  "${lt[@]}" --op=transpose --shape=1x1 --variants=auto --concurrency=1 --baseline=grpc \
    >> "$log" 2>&1

  # The profile: the PROFILE_ROW at c=64 over CONNECTIONS for 11 s.
  if [ -x "$perf" ]; then
    "${lt[@]}" "${profiled[@]}" --variants=auto --concurrency=64 --connections="$conns_many" \
      --max_time=11s --stable_windows=100 > "$out/profiled_$label.log" 2>&1 &
    load=$!
    sleep 1.5
    "$perf" stat -e task-clock,context-switches,cpu-migrations,syscalls:sys_enter_futex \
      -p "$server" -- sleep 2 > "$out/perf_stat_$label.txt" 2>&1
    "$perf" record -F 499 --call-graph dwarf,8192 -p "$server" -o "$out/oncpu_$label.data" \
      -- sleep 2 > /dev/null 2>&1
    "$perf" record -e sched:sched_switch --call-graph dwarf,8192 -p "$server" \
      -o "$out/offcpu_$label.data" -- sleep 1 > /dev/null 2>&1
    "$perf" record -e syscalls:sys_enter_futex --call-graph dwarf,8192 -p "$server" \
      -o "$out/futex_$label.data" -- sleep 0.4 > /dev/null 2>&1
    wait "$load"
  fi
  kill -TERM "$server"
  wait "$server"
  if [ -x "$perf" ]; then
    {
      echo "== on-CPU by thread"
      "$perf" report -i "$out/oncpu_$label.data" --stdio --no-children --sort comm \
        --percent-limit 1 -g none 2>/dev/null | grep -v "^#" | grep -v "^$"
      echo "== on-CPU by function (self), top"
      "$perf" report -i "$out/oncpu_$label.data" --stdio --no-children --sort sym \
        --percent-limit 0.7 -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45
      echo "== on-CPU inclusive, top"
      "$perf" report -i "$out/oncpu_$label.data" --stdio --children --sort sym \
        --percent-limit 4 -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -45
      echo "== off-CPU: where threads switch out (callers), top"
      "$perf" report -i "$out/offcpu_$label.data" --stdio --no-children --sort comm,sym \
        -g caller,2,callee,function,percent --percent-limit 3 2>/dev/null | grep -v "^#" \
        | grep -v "^$" | head -160
      echo "== futex calls: whose locks"
      "$perf" script -F comm,ip,sym,dso -i "$out/futex_$label.data" 2>/dev/null \
        | python3 "$(dirname "$0")/futex_callers.py"
    } > "$out/profile_$label.txt"
    rm -f "$out/oncpu_$label.data" "$out/offcpu_$label.data" "$out/futex_$label.data"
  fi
  {
    echo "== $label ($server_bin ${flags[*]})"
    grep -E " c=(1|8|64) " "$log"
    grep -E " c=64 " "$out/profiled_$label.log" 2>/dev/null | tail -1
    grep -E "task-clock|context-switches|futex|seconds time" "$out/perf_stat_$label.txt" 2>/dev/null
  } >> "$summary"
done
cat "$summary"
