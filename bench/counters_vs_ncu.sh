#!/usr/bin/env bash
# Profile's hardware counters beside Nsight Compute's, for the same kernels
# and shapes: gpucompute-counters reads each variant's counters the way
# Profile does (CUPTI's range profiler, the L2 flushed first), then ncu
# profiles one bare launch of each variant (--cache-control all, clocks
# left alone as Profile leaves them). Counts (.sum) are summed over the
# variant's kernels; ratios and percentages are compared only for variants
# of one kernel (ncu gives one value per kernel, Profile one per launch).
#   bench/counters_vs_ncu.sh PROBE [OUT_DIR]
# PROBE is the gpucompute-counters executable. NCU names ncu (default: ncu
# on PATH, else /usr/local/cuda/bin/ncu). CASES overrides the op:shape list.
# Prints one line per variant and metric, then a summary; logs in OUT_DIR.
set -u
probe=${1:?usage: counters_vs_ncu.sh PROBE [OUT_DIR]}
out=${2:-counters_vs_ncu}
mkdir -p "$out"
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
[ -x "$ncu" ] || { echo "counters_vs_ncu: no ncu (set NCU)" >&2; exit 1; }
cases=${CASES:-transpose:4096x4096 reduce:8192x8192 matmul:2048x2048x2048}

for c in $cases; do
  op=${c%%:*} shape=${c#*:}
  "$probe" --op="$op" --shape="$shape" --mode=cupti > "$out/cupti-$op.txt" 2> "$out/cupti-$op.err"
  for v in $("$probe" --op="$op" --shape="$shape" --mode=list); do
    # The metrics CUPTI read for this variant: a name ncu does not know
    # would fail its whole run.
    metrics=$(awk -v v="$v" '$1 == v {print $2}' "$out/cupti-$op.txt" | paste -sd, -)
    [ -n "$metrics" ] || metrics=$("$probe" --mode=metrics)
    "$ncu" --csv --page details --print-units base --cache-control all --clock-control none \
      --profile-from-start off --metrics "$metrics" \
      "$probe" --op="$op" --shape="$shape" --variants="$v" --mode=launch \
      > "$out/ncu-$op-$v.csv" 2> "$out/ncu-$op-$v.err"
  done
done

python3 - "$out" $cases <<'PY'
import csv, glob, os, sys
out, cases = sys.argv[1], sys.argv[2:]

def ncu_values(path):
    """metric -> list of per-kernel values."""
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    vals = {}
    for row in csv.DictReader(lines):
        v = row.get("Metric Value", "").replace(",", "")
        try:
            vals.setdefault(row["Metric Name"], {})[row["ID"]] = float(v)
        except ValueError:
            pass
    return {m: list(k.values()) for m, k in vals.items()}

rows, counts_equal, counts_5, ratios_5, ratios_n = [], 0, 0, 0, 0
n_counts = 0
print(f"{'op':9} {'variant':22} {'metric':72} {'cupti':>14} {'ncu':>14} {'diff':>8}")
for c in cases:
    op = c.split(":")[0]
    cupti = {}
    for line in open(os.path.join(out, f"cupti-{op}.txt")):
        if line.startswith("#"):
            print(line.rstrip()); continue
        v, m, x = line.split()
        cupti.setdefault(v, {})[m] = float(x)
    for v, ms in cupti.items():
        path = os.path.join(out, f"ncu-{op}-{v}.csv")
        n = ncu_values(path) if os.path.exists(path) else {}
        for m, x in ms.items():
            per_kernel = n.get(m, [])
            if not per_kernel:
                theirs, diff = "-", "no ncu"
            elif m.endswith(".sum"):
                y = sum(per_kernel); n_counts += 1
                d = 0.0 if x == y else abs(x - y) / max(abs(y), 1e-12)
                counts_equal += x == y; counts_5 += d <= 0.05
                theirs, diff = f"{y:.6g}", "equal" if x == y else f"{100*d:.2f}%"
            elif len(per_kernel) == 1:
                y = per_kernel[0]; ratios_n += 1
                d = abs(x - y) / max(abs(y), 1e-12) if y else abs(x)
                ratios_5 += d <= 0.05
                theirs, diff = f"{y:.6g}", f"{100*d:.2f}%"
            else:
                theirs, diff = f"{len(per_kernel)} kernels", "n/a"
            print(f"{op:9} {v:22} {m:72} {x:14.6g} {theirs:>14} {diff:>8}")
print(f"\nsummary: counts equal {counts_equal}/{n_counts}, within 5% {counts_5}/{n_counts}; "
      f"ratios and percentages (one-kernel variants) within 5% {ratios_5}/{ratios_n}")
PY
