#!/usr/bin/env python3
"""Compares gpucompute-bench runs of two builds, row by row.

    compare_bench.py --old old_1.json old_2.json --new new_1.json new_2.json

Each file is one `gpucompute-bench --json FILE` run (any mode). Rows are
matched by op, dtype, shape and variant (and their order among rows of
the same four). For each row both builds ran, it prints the median over
the rounds of each build's median_ms and their ratio, new over old, and
flags a row `slower` or `faster` where the ratio is past --threshold and
every round of one build is past every round of the other: a change that
one lucky or unlucky round cannot make. Run the builds in alternating
rounds on one machine (old, new, old, new) so that the machine's drift
falls on both. A flag from one round each is marked as such. Rows only
one build ran are listed at the end.

Exits 1 when any row is flagged slower, 2 on unreadable input, else 0.
The standard library only.
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict


def read_rows(path):
    """{(op, dtype, shape, variant, n): median_ms} of one run; n counts
    earlier rows with the same four fields."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    rows = report.get("rows", []) if isinstance(report, dict) else []
    seen = defaultdict(int)
    out = {}
    for row in rows:
        four = tuple(str(row.get(k, "")) for k in ("op", "dtype", "shape", "variant"))
        ms = row.get("median_ms")
        if not row.get("ok", True) or not isinstance(ms, (int, float)) or ms <= 0:
            continue
        out[four + (seen[four],)] = float(ms)
        seen[four] += 1
    return out


def rounds_of(paths):
    """{row: [median_ms of each round that ran it]}."""
    out = defaultdict(list)
    for path in paths:
        for key, ms in read_rows(path).items():
            out[key].append(ms)
    return out


def verdict(old, new, threshold):
    """'slower', 'faster' or '' for one row's rounds (ms, lower is better)."""
    ratio = statistics.median(new) / statistics.median(old)
    if ratio > 1 + threshold and min(new) > max(old):
        return "slower"
    if ratio < 1 - threshold and max(new) < min(old):
        return "faster"
    return ""


def compare(old_paths, new_paths, threshold, out=None):
    """Prints the table (to `out`, else stdout); returns how many rows are
    flagged slower."""
    out = out or sys.stdout
    old, new = rounds_of(old_paths), rounds_of(new_paths)
    both = [key for key in old if key in new]
    one_round = len(old_paths) == 1 or len(new_paths) == 1
    print(
        f"{'op':24} {'dtype':9} {'shape':16} {'variant':28} "
        f"{'old ms':>9} {'new ms':>9} {'new/old':>8}",
        file=out,
    )
    slower = faster = 0
    for key in both:
        o, n = statistics.median(old[key]), statistics.median(new[key])
        flag = verdict(old[key], new[key], threshold)
        slower += flag == "slower"
        faster += flag == "faster"
        if flag and one_round:
            flag += " (one round)"
        op, dtype, shape, variant, _ = key
        print(
            f"{op:24} {dtype:9} {shape:16} {variant:28} {o:9.4f} {n:9.4f} {n / o:8.3f}  {flag}",
            file=out,
        )
    for name, mine, theirs in (("old", old, new), ("new", new, old)):
        for key in mine:
            if key not in theirs:
                print(f"only {name}: {' '.join(key[:4])}", file=out)
    print(
        f"{len(both)} rows in both; {slower} slower and {faster} faster by more than "
        f"{threshold:.1%} in every round ({len(old_paths)} old, {len(new_paths)} new)",
        file=out,
    )
    return slower


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", nargs="+", required=True, help="runs of the old build")
    parser.add_argument("--new", nargs="+", required=True, help="runs of the new build")
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.02,
        help="the change in the median that a flag needs, as a fraction (default 0.02)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.threshold < 1:
        parser.error(f"--threshold {args.threshold} is not a fraction in [0, 1)")
    try:
        slower = compare(args.old, args.new, args.threshold)
    except (OSError, ValueError) as e:
        print(f"compare_bench: {e}", file=sys.stderr)
        return 2
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
