"""ProfileResult: a Profile response as rows of dicts, a table and JSON."""

from __future__ import annotations

import json
from typing import Iterator

from gpucompute.v1 import compute_pb2 as pb


_PROFILE_COLUMNS = (
    "variant",
    "ok",
    "median_us",
    "min_us",
    "max_us",
    "gflops",
    "gbytes_per_s",
    "fraction_of_roofline",
    "max_rel_error",
    "error",
    "description",
    "note",
)

_COMPARISON_COLUMNS = (
    "idea",
    "lesson",
    "before",
    "after",
    "time_ratio",
    "counter",
    "counter_before",
    "counter_after",
)


class ProfileResult:
    """Rows of a Profile, fastest correct variant first.

    print(result) shows a table; pandas.DataFrame(result.rows) loads it;
    iterating yields one dict per variant. `comparisons` holds one dict per
    pair of variants that differ by one idea and both ran ok (idea, lesson,
    before, after, time_ratio = before's median / after's; counter fields
    stay empty until a server reads hardware counters).
    """

    def __init__(self, response: pb.ProfileResponse):
        self.selected: str = response.selected
        self.device: str = response.device
        self.peak_gbytes_per_s: float = response.peak_gbytes_per_s
        self.peak_read_gbytes_per_s: float = response.peak_read_gbytes_per_s
        self.peak_gflops: float = response.peak_gflops
        self.seed: int = response.seed
        self.cold_cache: bool = response.cold_cache
        self.rows: list = [{c: getattr(v, c) for c in _PROFILE_COLUMNS} for v in response.variants]
        self.comparisons: list = [
            {c: getattr(x, c) for c in _COMPARISON_COLUMNS} for x in response.comparisons
        ]

    def __iter__(self) -> Iterator[dict]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def to_json(self) -> str:
        return json.dumps(
            {
                "device": self.device,
                "selected": self.selected,
                "seed": self.seed,
                "peak_gbytes_per_s": self.peak_gbytes_per_s,
                "peak_read_gbytes_per_s": self.peak_read_gbytes_per_s,
                "peak_gflops": self.peak_gflops,
                "variants": self.rows,
                "comparisons": self.comparisons,
            },
            indent=2,
        )

    def __str__(self) -> str:
        header = ("variant", "ok", "median_us", "GFLOP/s", "GB/s", "roofline", "max_rel_err")
        body = [
            (
                r["variant"],
                "yes" if r["ok"] else "NO",
                f"{r['median_us']:.1f}",
                f"{r['gflops']:.1f}",
                f"{r['gbytes_per_s']:.1f}",
                f"{r['fraction_of_roofline']:.3f}",
                f"{r['max_rel_error']:.2e}",
            )
            for r in self.rows
        ]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
        lines = [
            f"device {self.device}; auto selects {self.selected or '-'}; "
            f"inputs seed {self.seed}"
        ]
        for row in [header, *body]:
            lines.append(
                "  ".join(
                    cell.ljust(w) if i == 0 else cell.rjust(w)
                    for i, (cell, w) in enumerate(zip(row, widths))
                )
            )
        lines += [f"  {r['variant']}: {r['error']}" for r in self.rows if r["error"]]
        lines += [f"  {r['variant']}: note: {r['note']}" for r in self.rows if r["note"]]
        if self.comparisons:
            lines.append("comparisons (time ratio: before's median / after's)")
            lines += [
                f"  {x['idea']}: {x['before']} -> {x['after']}  {x['time_ratio']:.2f}x  "
                f"{x['lesson']}"
                for x in self.comparisons
            ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<ProfileResult {len(self.rows)} variants on {self.device!r}>"
