#!/usr/bin/env bash
# Servers that differ in a flag, compared on the small-request rows in
# alternating rounds (A B, B A, A B ...: each round starts with the next
# server, so none holds one place in every round), so that a host's drift
# between servers (the health floor alone moves 5-20% from one server start
# to the next) falls on both sides. Each round starts each server afresh
# and runs, over 8 connections: the 1x1 Transpose at c=64 beside the health
# Check and ListTensors, the 64^3 MatMul at c=1, 8 and 64 inline beside a
# gRPC echo of its bytes, and with resident operands and a kept output
# beside the health Check of the same load-test run; and over 1 connection
# the inline MatMul at c=64 beside its echo. Logs go to OUT_DIR; the medians over the rounds
# of each row and ratio are printed, with each server's mean batch per row,
# the first server's rates over each other's paired by round (as they are,
# and each over its own round's floor), where each row's mean call went (its
# way in, the server's part, its way out), then what `auto` chose for each
# bucket on each server (its calibration log lines, counted over the
# rounds, then round by round beside the round's MatMul c=1 rate).
#   bench/small_request_ab.sh BIN_DIR OUT_DIR ROUNDS LABEL=SERVER[:FLAGS]...
# BIN_DIR holds gpucompute-loadtest. Each server listens on 127.0.0.1:50051.
# SERVER_CPUS and CLIENT_CPUS (taskset lists, e.g. 0-7 and 8-15) keep the
# servers and the load test on cores of their own, where the host's
# scheduler would otherwise mix them differently from one start to the next.
# The echo floor is served in the load test's process, so pinned it shares
# the load test's cores and reads low: judge pinned rounds by the health floor.
# ROWS picks the load-test runs of each round (default "transpose matmul
# matmul1"; e.g. ROWS=matmul for the MatMul at c=1, 8 and 64 alone, a third
# of the time a round, so more rounds fit where one round settles nothing;
# ROWS=low for the inline MatMul at c=1 and 8 alone, a few seconds a round,
# for the many server starts that those rows need: each start lands in a
# fast or a slow mode at c=1 on some hosts, and one pair of starts is a draw).
# ECHO_AT=server sets the MatMul rows against the server's own Echo rpc
# instead of the load test's in-process echo (the load test's --echo_at).
# The row matmul_echo_server (add it to ROWS) runs the inline MatMul at
# c=64 once more beside the server's Echo, so that each round reads it
# against both floors; the summary then shows it as a row of its own.
# MAX_SECONDS stops before a round that would end past it (judged by the
# mean round so far) and still prints the summary of the rounds run, so
# that a caller's own time limit does not lose it.
set -u
usage="usage: small_request_ab.sh BIN_DIR OUT_DIR ROUNDS LABEL=SERVER[:FLAGS]..."
bin=${1:?$usage}
out=${2:?$usage}
rounds=${3:?$usage}
shift 3
mkdir -p "$out"
. "$(dirname "$0")/server_spec.sh"
lt=()
[ -n "${CLIENT_CPUS:-}" ] && lt=(taskset -c "$CLIENT_CPUS")
lt+=("$bin/gpucompute-loadtest" --server=127.0.0.1:50051 --warmup=0.5s --window=0.5s
  --max_time=3s --connections=8 --echo_at="${ECHO_AT:-loadtest}")
rows=$out/rows.tsv
: > "$rows"

# "label round row req/s" for each row of a load-test log, the row named by
# `prefix`, variant, load and placement; and "label round row_batch N" with
# the row's mean batch (the field before `transport`: the tenth past the
# first "|", whose stages are each a number and a unit), where it has one.
collect() {
  awk -v label="$1" -v round="$2" -v prefix="$3" '
    function batch(name,   i) {
      for (i = 1; i <= NF; ++i) if ($i == "|") break
      if ($(i + 11) ~ /^[0-9.]+$/) print label, round, name "_batch", $(i + 11)
    }
    $2 ~ /^c=/ && $3 ~ /^[0-9]+$/ && $4 ~ /^[0-9.]+$/ {
      print label, round, prefix ":" $1 "_" $2, $4; batch(prefix ":" $1 "_" $2)
    }
    $2 == "[tensor]" && $3 ~ /^c=/ && $4 ~ /^[0-9]+$/ && $5 ~ /^[0-9.]+$/ {
      print label, round, prefix ":" $1 "_tensor_" $3, $5; batch(prefix ":" $1 "_tensor_" $3)
    }
    # "  auto [tensor] c=64 8  in 423 us  server 215 us  out 399 ms": the
    # mean call split (way in, the server, way out), kept in microseconds.
    /^  / && NF >= 12 && $(NF - 8) == "in" && $(NF - 5) == "server" && $(NF - 2) == "out" {
      name = ($2 == "[tensor]") ? $1 "_tensor_" $3 : $1 "_" $2
      for (k = NF - 8; k < NF; k += 3) {
        us = $(k + 1) * ($(k + 2) == "ms" ? 1000 : $(k + 2) == "s" ? 1e6 : 1)
        print label, round, prefix ":" name "_" $k, us
      }
    }
  ' "$4" >> "$rows"
}

specs=("$@")
started=$SECONDS
for round in $(seq 1 "$rounds"); do
  if [ -n "${MAX_SECONDS:-}" ] && [ "$round" -gt 1 ]; then
    done_rounds=$((round - 1))
    elapsed=$((SECONDS - started))
    if [ $((elapsed + elapsed / done_rounds)) -gt "$MAX_SECONDS" ]; then
      echo "small_request_ab.sh: $done_rounds of $rounds rounds run in ${elapsed} s;" \
        "another would pass MAX_SECONDS=$MAX_SECONDS" >&2
      break
    fi
  fi
  for k in "${!specs[@]}"; do
    spec=${specs[$(((round - 1 + k) % ${#specs[@]}))]}
    log=$out/${spec%%=*}_$round
    start_server "$spec" "$log.server.log"
    for row in ${ROWS:-transpose matmul matmul1}; do
      case $row in
        transpose)
          "${lt[@]}" --op=transpose --shape=1x1 --variants=auto --concurrency=64 \
            --baseline=grpc,service > "$log.transpose.log" 2>&1 ;;
        matmul)
          "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=1,8,64 \
            --placement=inline,tensor --baseline=echo,grpc > "$log.matmul.log" 2>&1 ;;
        low)
          "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=1,8 \
            --placement=inline > "$log.matmul.log" 2>&1 ;;
        matmul1)
          "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=64 \
            --connections=1 --baseline=echo > "$log.matmul1.log" 2>&1 ;;
        matmul_echo_server)
          "${lt[@]}" --op=matmul --shape=64x64x64 --variants=auto --concurrency=64 \
            --baseline=echo --echo_at=server > "$log.matmul_echo_server.log" 2>&1 ;;
        *) echo "small_request_ab.sh: ROWS: unknown row \"$row\"" >&2; kill -TERM "$server"; exit 2 ;;
      esac
    done
    kill -TERM "$server"
    wait "$server"
    [ -f "$log.transpose.log" ] && collect "$label" "$round" T "$log.transpose.log"
    [ -f "$log.matmul.log" ] && collect "$label" "$round" M "$log.matmul.log"
    [ -f "$log.matmul1.log" ] && collect "$label" "$round" M1 "$log.matmul1.log"
    [ -f "$log.matmul_echo_server.log" ] &&
      collect "$label" "$round" MS "$log.matmul_echo_server.log"
  done
done

# Per server, the median over the rounds of each figure.
python3 - "$rows" "$@" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # (label, round) -> row -> req/s
for line in open(sys.argv[1]):
    label, rnd, row, value = line.split()
    runs[(label, rnd)].setdefault(row, float(value))
labels = [spec.split("=", 1)[0] for spec in sys.argv[2:]]
figures = [
    ("1x1 Transpose c=64 / health", "T:auto_c=64", "T:grpc_health_c=64"),
    ("64^3 MatMul inline c=64 / echo", "M:auto_c=64", "M:grpc_echo_c=64"),
    ("64^3 MatMul resident kept c=64 / health", "M:auto_tensor_c=64", "M:grpc_health_c=64"),
    ("ListTensors c=64 / health", "T:list_tensors_c=64", "T:grpc_health_c=64"),
    ("the MatMul inline c=64, 1 connection / echo", "M1:auto_c=64", "M1:grpc_echo_c=64"),
    ("the MatMul inline c=64 / the server's Echo", "MS:auto_c=64", "MS:grpc_echo_c=64"),
    ("1x1 Transpose c=64, req/s", "T:auto_c=64", None),
    ("64^3 MatMul inline c=1, req/s", "M:auto_c=1", None),
    ("64^3 MatMul inline c=8, req/s", "M:auto_c=8", None),
    ("64^3 MatMul inline c=64, req/s", "M:auto_c=64", None),
    ("64^3 MatMul resident kept c=64, req/s", "M:auto_tensor_c=64", None),
    ("health c=64, req/s", "T:grpc_health_c=64", None),
    ("health c=64 beside the MatMuls, req/s", "M:grpc_health_c=64", None),
]
def values(label, num, den):
    return [r[num] / r[den] if den else r[num] / 1000 for (l, rnd), r in sorted(runs.items())
            if l == label and num in r and (not den or r.get(den))]

# The medians, then each figure's lowest and highest round: between server
# starts a floor alone moves by 5-20%, and a difference inside that range
# is not one this run resolves. Rates are in thousands per second.
ratio_or_rate = lambda v, den: f"{v:.2f}" if den else f"{v:.1f}k"
tables = (
    ("median over rounds (8 connections)",
     lambda v, den: f"{ratio_or_rate(statistics.median(v), den)} ({len(v)})"),
    ("lowest - highest round",
     lambda v, den: f"{ratio_or_rate(min(v), den)}-{ratio_or_rate(max(v), den)}"),
)
for title, fmt in tables:
    print(f"{title:42s}" + "".join(f"{l:>16s}" for l in labels))
    for name, num, den in figures:
        cells = [values(label, num, den) for label in labels]
        print(f"{name:42s}" + "".join(f"{fmt(v, den) if v else '-':>16s}" for v in cells))

# Paired by round: the first server's figure over each other server's in
# the same round (started one after the other, minutes apart at most), so
# that drift from one round to the next falls out of the ratio. The median,
# the lowest and highest round, and in how many rounds the first server was
# ahead. `value(r, num)` is a round's figure, None where it has none; only
# the rates named in `nums` are paired (all when None).
def print_pairs(title, value, nums=None):
    for other in labels[1:]:
        print(f"{labels[0] + ' / ' + other + ', ' + title:42s}"
              f"{'median':>10s}{'lowest-highest':>16s}{'ahead':>10s}")
        for name, num, den in figures:
            if den or (nums is not None and num not in nums):
                continue
            pairs = []
            for (l, rnd), r in sorted(runs.items()):
                mine, first = value(r, num), value(runs.get((labels[0], rnd), {}), num)
                if l == other and mine and first is not None:
                    pairs.append(first / mine)
            if not pairs:
                continue
            spread = f"{min(pairs):.2f}-{max(pairs):.2f}"
            ahead = f"{sum(p >= 1.0 for p in pairs)} of {len(pairs)}"
            print(f"{name.removesuffix(', req/s'):42s}{statistics.median(pairs):>10.2f}"
                  f"{spread:>16s}{ahead:>10s}")

print_pairs("paired by round", lambda r, num: r.get(num))

# The same pairs with each rate first taken over its own round's floor (the
# echo of the same load-test run at the same concurrency for an inline row,
# the health Check for the others): a server start that reads fast or slow
# for every call alike, the floors included, falls out too.
floors = {
    "T:auto_c=64": "T:grpc_health_c=64",
    "M:auto_c=1": "M:grpc_echo_c=1",
    "M:auto_c=8": "M:grpc_echo_c=8",
    "M:auto_c=64": "M:grpc_echo_c=64",
    "M:auto_tensor_c=64": "M:grpc_health_c=64",
}
def over_floor(r, num):
    den = floors[num]
    return r[num] / r[den] if r.get(num) and r.get(den) else None
print_pairs("each over its floor", over_floor, floors)

# How many requests ran together with each, where batching is on: a rate
# that moves with batching means little unless batches formed.
print(f"{'mean batch, median over rounds':42s}" + "".join(f"{l:>16s}" for l in labels))
for name, num in [("1x1 Transpose c=64", "T:auto_c=64"), ("64^3 MatMul inline c=8", "M:auto_c=8"),
                  ("64^3 MatMul inline c=64", "M:auto_c=64"),
                  ("64^3 MatMul resident kept c=64", "M:auto_tensor_c=64")]:
    cells = [[r[num + "_batch"] for (l, rnd), r in sorted(runs.items())
              if l == label and num + "_batch" in r] for label in labels]
    print(f"{name:42s}" + "".join(
        f"{statistics.median(v):>16.2f}" if v else f"{'-':>16s}" for v in cells))

# Where each row's mean call went (the load test's split, from the
# server's received time): the way in, the server's part and the way out,
# microseconds, median over rounds. A closed loop's calls wait wherever the
# bound puts them; a server part that shrinks while the sum holds moved
# the wait, it did not remove it.
def way_cell(label, num):
    parts = [[r[f"{num}_{w}"] for (l, rnd), r in sorted(runs.items())
              if l == label and f"{num}_{w}" in r] for w in ("in", "server", "out")]
    return "/".join(f"{statistics.median(v):.0f}" for v in parts) if all(parts) else "-"
way_rows = [("1x1 Transpose c=64", "T:auto_c=64"), ("64^3 MatMul inline c=1", "M:auto_c=1"),
            ("64^3 MatMul inline c=8", "M:auto_c=8"), ("64^3 MatMul inline c=64", "M:auto_c=64"),
            ("64^3 MatMul resident kept c=64", "M:auto_tensor_c=64"),
            ("the MatMul inline c=64, 1 connection", "M1:auto_c=64")]
way_lines = [(name, [way_cell(label, num) for label in labels]) for name, num in way_rows]
way_lines = [(name, cells) for name, cells in way_lines if any(c != "-" for c in cells)]
if way_lines:
    print(f"\n{'in / server / out, us, median over rounds':42s}" +
          "".join(f"{l:>20s}" for l in labels))
    for name, cells in way_lines:
        print(f"{name:42s}" + "".join(f"{c:>20s}" for c in cells))
PY

# What `auto` chose, per server: "auto for <bucket>: <variant> (<how timed>".
# Each start calibrates afresh, and kernels a fraction of a microsecond
# apart may rank either way: per round beside that round's c=1 rate, so a
# rate that follows the choice shows.
choices() { sed 's/^.*auto for //; s/: \([^ ]*\) (\([^:]*\):.*/: \1 (\2)/'; }
echo
for spec in "$@"; do
  label=${spec%%=*}
  echo "auto's choices on $label, counted over the rounds:"
  chosen=$(grep -h "auto for " "$out/${label}"_*.server.log 2>/dev/null | choices | sort | uniq -c)
  echo "${chosen:-      none logged (a single candidate is never calibrated)}"
done
echo
echo "round by round: server, round, 64^3 MatMul inline c=1 req/s (k), auto's choices"
for round in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    label=${spec%%=*}
    rate=$(awk -v l="$label" -v r="$round" '$1 == l && $2 == r && $3 == "M:auto_c=1" {
      printf "%.2f", $4 / 1000 }' "$rows")
    chosen=$(grep -h "auto for " "$out/${label}_$round.server.log" 2>/dev/null | choices |
      sed 's/ (.*//' | paste -sd ';' -)
    printf '%-10s %3s %8s  %s\n' "$label" "$round" "${rate:--}" "${chosen:--}"
  done
done
