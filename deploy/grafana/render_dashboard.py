#!/usr/bin/env python3
"""Renders deploy/grafana/gpucompute.json as a static HTML page: every panel's
queries evaluated by a Prometheus (query_range over the last --minutes), drawn
as SVG line charts (stat panels: the last value), laid out on the dashboard's
grid. For the README's picture of the dashboard where no Grafana runs; a
headless browser turns the page into a PNG:

  deploy/grafana/render_dashboard.py --prometheus http://127.0.0.1:9090 --out dash.html
  chromium --headless --screenshot=dash.png --window-size=1600,2400 dash.html

Python 3 standard library only.
"""

import argparse
import html
import json
import math
import pathlib
import time
import urllib.parse
import urllib.request

DASHBOARD = pathlib.Path(__file__).resolve().parent / "gpucompute.json"
COLORS = [
    "#7eb26d",
    "#eab839",
    "#6ed0e0",
    "#ef843c",
    "#e24d42",
    "#1f78c1",
    "#ba43a9",
    "#705da0",
    "#508642",
    "#cca300",
]
CELL_W, CELL_H = 64, 30  # pixels per grid column and row


def query_range(prometheus, expr, start, end, step):
    url = f"{prometheus}/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step}
    )
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    return body["data"]["result"] if body.get("status") == "success" else []


def legend(fmt, metric):
    return (
        fmt.replace("{{", "{")
        .replace("}}", "}")
        .format_map(type("L", (dict,), {"__missing__": lambda self, k: ""})(metric))
        .strip()
        or "value"
    )


def human(value, unit):
    if value is None or math.isnan(value):
        return "-"
    scale = {
        "bytes": (1024, ["B", "KiB", "MiB", "GiB", "TiB"]),
        "Bps": (1024, ["B/s", "KiB/s", "MiB/s", "GiB/s"]),
        "hertz": (1000, ["Hz", "kHz", "MHz", "GHz"]),
    }
    if unit in scale:
        base, names = scale[unit]
        i = 0
        while abs(value) >= base and i < len(names) - 1:
            value, i = value / base, i + 1
        return f"{value:.3g} {names[i]}"
    if unit == "s":
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    suffix = {"reqps": " req/s", "watt": " W", "celsius": " C"}.get(unit, "")
    return f"{value:.4g}{suffix}"


def chart(series, unit, width, height):
    points = [v for s in series for _, v in s["values"] if not math.isnan(v)]
    if not points:
        return f'<div class="nodata" style="height:{height}px">No data</div>'
    lo, hi = min(points + [0]), max(points)
    hi = hi if hi > lo else lo + 1
    times = [t for s in series for t, _ in s["values"]]
    t0, t1 = min(times), max(times)
    t1 = t1 if t1 > t0 else t0 + 1
    pad = 46
    svg = [
        f'<svg width="{width}" height="{height}">',
        f'<text x="2" y="12" class="axis">{html.escape(human(hi, unit))}</text>',
        f'<text x="2" y="{height - 4}" class="axis">{html.escape(human(lo, unit))}</text>',
    ]
    for i, s in enumerate(series):
        xy = " ".join(
            f"{pad + (t - t0) / (t1 - t0) * (width - pad - 4):.1f},"
            f"{height - 4 - (v - lo) / (hi - lo) * (height - 12):.1f}"
            for t, v in s["values"]
            if not math.isnan(v)
        )
        svg.append(
            f'<polyline fill="none" stroke="{COLORS[i % len(COLORS)]}" '
            f'stroke-width="1.5" points="{xy}"/>'
        )
    svg.append("</svg>")
    return "".join(svg)


def render(prometheus, minutes, rate_interval):
    dashboard = json.loads(DASHBOARD.read_text())
    end = time.time()
    start = end - minutes * 60
    step = max(1, int(minutes * 60 / 240))
    blocks = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        style = (
            f"left:{grid['x'] * CELL_W}px;top:{grid['y'] * CELL_H}px;"
            f"width:{grid['w'] * CELL_W - 8}px;height:{grid['h'] * CELL_H - 8}px"
        )
        title = html.escape(panel["title"])
        if panel["type"] == "row":
            blocks.append(f'<div class="row" style="{style}">{title}</div>')
            continue
        unit = panel["fieldConfig"]["defaults"].get("unit", "none")
        series = []
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", rate_interval)
            for r in query_range(prometheus, expr, start, end, step):
                values = [(float(t), float(v)) for t, v in r["values"]]
                series.append(
                    {"name": legend(target.get("legendFormat", ""), r["metric"]), "values": values}
                )
        if panel["type"] == "stat":
            cells = (
                "".join(
                    f'<div class="stat">{html.escape(s["name"])}<b>{html.escape(human(s["values"][-1][1], unit))}</b></div>'
                    for s in series
                )
                or '<div class="nodata">No data</div>'
            )
            blocks.append(f'<div class="panel" style="{style}"><h3>{title}</h3>{cells}</div>')
            continue
        height = grid["h"] * CELL_H - 8
        body = chart(
            series, unit, grid["w"] * CELL_W - 24, max(60, height - 40 - 14 * min(len(series), 6))
        )
        rows = "".join(
            f'<div class="leg"><i style="background:{COLORS[i % len(COLORS)]}"></i>'
            f'{html.escape(s["name"])} <span>{html.escape(human(s["values"][-1][1], unit))}</span></div>'
            for i, s in enumerate(series[:6])
        )
        more = f'<div class="leg">+{len(series) - 6} more</div>' if len(series) > 6 else ""
        blocks.append(
            f'<div class="panel" style="{style}"><h3>{title}</h3>{body}{rows}{more}</div>'
        )
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"]) * CELL_H
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(end))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpucompute</title><style>
body{{background:#111217;color:#ccccdc;font:12px sans-serif;margin:8px}}
#grid{{position:relative;height:{bottom}px}} .panel,.row{{position:absolute;box-sizing:border-box}}
.panel{{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:4px 8px;overflow:hidden}}
.row{{font-size:15px;font-weight:bold;padding-top:6px}} h3{{margin:0 0 4px;font-size:13px}}
.axis{{fill:#8e8e8e;font-size:10px}} .leg{{white-space:nowrap;overflow:hidden}}
.leg i{{display:inline-block;width:10px;height:3px;margin:0 4px 3px 0}} .leg span{{color:#fff;float:right}}
.stat{{display:inline-block;margin-right:16px}} .stat b{{display:block;font-size:22px;color:#73bf69}}
.nodata{{color:#8e8e8e;display:flex;align-items:center;justify-content:center}}
</style></head><body><h2>gpucompute &middot; last {minutes} min &middot; {stamp}</h2>
<div id="grid">{''.join(blocks)}</div></body></html>"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument(
        "--rate_interval",
        default="1m",
        help="what Grafana's $__rate_interval stands for (4 scrape intervals)",
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    pathlib.Path(args.out).write_text(render(args.prometheus, args.minutes, args.rate_interval))


if __name__ == "__main__":
    main()
