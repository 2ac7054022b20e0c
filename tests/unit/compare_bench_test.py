#!/usr/bin/env python3
"""bench/compare_bench.py on made-up gpucompute-bench reports: which rows
it flags, what it leaves alone, and its exit codes.

Run: python3 tests/unit/compare_bench_test.py [-v]
"""

import io
import json
import os
import pathlib
import sys
import tempfile
import unittest

ROOT = pathlib.Path(
    os.environ.get("GPUCOMPUTE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2])
)
sys.path.insert(0, str(ROOT / "bench"))

import compare_bench  # noqa: E402


def row(variant, ms, op="reduce sum per_column", dtype="float16", ok=True):
    return {
        "op": op,
        "dtype": dtype,
        "shape": "16384x16384",
        "variant": variant,
        "ok": ok,
        "median_ms": ms,
    }


class CompareBenchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def report(self, name, rows):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"device": "", "rows": rows}, f)
        return path

    def run_compare(self, old, new, threshold=0.02):
        out = io.StringIO()
        slower = compare_bench.compare(old, new, threshold, out)
        return slower, out.getvalue()

    def line_of(self, text, variant):
        lines = [line for line in text.splitlines() if f" {variant} " in line]
        self.assertEqual(len(lines), 1, text)
        return lines[0]

    def test_flags_only_a_change_every_round_agrees_on(self):
        old = [
            self.report("o1.json", [row("steady", 1.00), row("slow", 0.180), row("noisy", 1.0)]),
            self.report("o2.json", [row("steady", 1.01), row("slow", 0.181), row("noisy", 1.2)]),
        ]
        new = [
            self.report("n1.json", [row("steady", 1.00), row("slow", 0.205), row("noisy", 1.1)]),
            self.report("n2.json", [row("steady", 1.00), row("slow", 0.186), row("noisy", 1.4)]),
        ]
        slower, text = self.run_compare(old, new)
        self.assertEqual(slower, 1, text)
        self.assertTrue(self.line_of(text, "slow").endswith("slower"), text)
        # 1.1 and 1.4 against 1.0 and 1.2: the rounds overlap, no flag.
        self.assertFalse(self.line_of(text, "noisy").rstrip().endswith("slower"), text)
        self.assertNotIn("faster", self.line_of(text, "steady"))
        self.assertIn("3 rows in both; 1 slower and 0 faster", text)

    def test_a_faster_row_and_the_threshold(self):
        old = [self.report("o.json", [row("better", 2.0), row("slight", 1.0)])]
        new = [self.report("n.json", [row("better", 1.5), row("slight", 0.99)])]
        slower, text = self.run_compare(old, new)
        self.assertEqual(slower, 0)
        self.assertTrue(self.line_of(text, "better").endswith("faster (one round)"), text)
        self.assertTrue(self.line_of(text, "slight").rstrip().endswith("0.990"), text)
        # With a threshold of 0.5 the 25% gain is no longer flagged.
        _, text = self.run_compare(old, new, threshold=0.5)
        self.assertNotIn("faster (one round)", text)

    def test_rows_of_one_build_failed_rows_and_repeated_rows(self):
        old = [
            self.report(
                "o.json",
                [row("gone", 1.0), row("twice", 1.0), row("twice", 2.0), row("broken", 1.0)],
            )
        ]
        new = [
            self.report(
                "n.json",
                [
                    row("added", 1.0),
                    row("twice", 1.0),
                    row("twice", 3.0),
                    row("broken", 9.0, ok=False),
                ],
            )
        ]
        slower, text = self.run_compare(old, new)
        self.assertIn("only old: reduce sum per_column float16 16384x16384 gone", text)
        self.assertIn("only new: reduce sum per_column float16 16384x16384 added", text)
        # A failed row is no timing: the old one stands alone.
        self.assertIn("only old: reduce sum per_column float16 16384x16384 broken", text)
        # Repeated rows pair in order: the second is 1.5x slower.
        twice = [line for line in text.splitlines() if " twice " in line]
        self.assertEqual(len(twice), 2, text)
        self.assertTrue(twice[1].endswith("slower (one round)"), text)
        self.assertEqual(slower, 1)

    def test_exit_codes(self):
        same = self.report("same.json", [row("a", 1.0)])
        worse = self.report("worse.json", [row("a", 1.5)])
        sys.stdout, saved = io.StringIO(), sys.stdout
        sys.stderr, saved_err = io.StringIO(), sys.stderr
        try:
            self.assertEqual(compare_bench.main(["--old", same, "--new", same]), 0)
            self.assertEqual(compare_bench.main(["--old", same, "--new", worse]), 1)
            missing = os.path.join(self.dir.name, "missing.json")
            self.assertEqual(compare_bench.main(["--old", missing, "--new", same]), 2)
            bad = self.report("bad.json", [])
            with open(bad, "w", encoding="utf-8") as f:
                f.write("{not json")
            self.assertEqual(compare_bench.main(["--old", bad, "--new", same]), 2)
        finally:
            sys.stdout, sys.stderr = saved, saved_err


if __name__ == "__main__":
    unittest.main()
