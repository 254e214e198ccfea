#!/usr/bin/env python3
"""bench/scale/plot.py: draws scale_load's JSON rows (--json) as an SVG.

Usage: plot.py ROWS.json OUT.svg

Left panel: completions/s per worker count, one bar per driver and run
kind. Right panel: take latency p50 / p99 / p999 of the sustained runs (log
scale), per driver. Rows without a "driver" (older JSON) are "unary".
Plain SVG written by hand: matplotlib is not on every machine this runs on.
"""
import json
import math
import sys

MODES = [("sustained", "sustained", "#4c72b0"),
         ("saturation", "saturation, in memory", "#55a868"),
         ("durable", "saturation, --state-dir", "#c44e52")]
QUANTILES = [("p50_ms", "p50", "#8172b2"), ("p99_ms", "p99", "#ccb974"),
             ("p999_ms", "p999", "#64b5cd")]
# The second driver's bars are drawn lighter.
LIGHTER = {"#4c72b0": "#a6b9d8", "#55a868": "#aad4b4", "#c44e52": "#e2a7a9",
           "#8172b2": "#c0b9d9", "#ccb974": "#e6dcba", "#64b5cd": "#b2dae6"}


def series_for(drivers, base):
    """(key, label, colour) per driver x base series; key = (driver, base key)."""
    out = []
    for i, driver in enumerate(drivers):
        for key, label, colour in base:
            out.append(((driver, key), f"{driver}: {label}" if len(drivers) > 1 else label,
                        colour if i == 0 else LIGHTER.get(colour, colour)))
    return out


def text(x, y, s, size=12, anchor="middle", rotate=None):
    t = f' transform="rotate({rotate} {x} {y})"' if rotate else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="sans-serif"{t}>{s}</text>')


def bars_panel(x0, y0, w, h, groups, series, value_of, title, ylabel, log=False):
    """Grouped bars: groups (x labels) x series (label, colour)."""
    out = [text(x0 + w / 2, y0 - 12, title, 14)]
    values = [value_of(g, s) for g in groups for s, _, _ in series]
    values = [v for v in values if v is not None and v > 0]
    top = max(values) if values else 1.0
    if log:
        lo = 10 ** math.floor(math.log10(min(values))) if values else 0.1
        hi = 10 ** math.ceil(math.log10(top)) if values else 1.0

        def scale(v):
            return h * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        ticks = [10 ** e for e in range(int(math.log10(lo)), int(math.log10(hi)) + 1)]
    else:
        step = 10 ** math.floor(math.log10(top)) if top > 0 else 1
        hi = math.ceil(top / step) * step

        def scale(v):
            return h * v / hi
        ticks = [i * step for i in range(int(hi / step) + 1)]
    out.append(f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + h}" stroke="black"/>')
    for t in ticks:
        y = y0 + h - scale(t)
        out.append(f'<line x1="{x0 - 4}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" '
                   'stroke="#ddd"/>')
        out.append(text(x0 - 6, y + 4, f"{t:g}", 10, "end"))
    out.append(text(x0 - 48, y0 + h / 2, ylabel, 12, rotate=-90))
    gw = w / max(1, len(groups))
    bw = gw * 0.8 / max(1, len(series))
    for i, g in enumerate(groups):
        gx = x0 + i * gw + gw * 0.1
        for j, (key, label, colour) in enumerate(series):
            v = value_of(g, key)
            if v is None or v <= 0:
                continue
            bh = max(1.0, scale(v))
            out.append(f'<rect x="{gx + j * bw:.1f}" y="{y0 + h - bh:.1f}" width="{bw - 2:.1f}" '
                       f'height="{bh:.1f}" fill="{colour}"><title>{label}: {v:g}</title></rect>')
        out.append(text(x0 + i * gw + gw / 2, y0 + h + 16, f"N = {g:,}", 11))
    # The legend under the axis, in two columns, clear of the bars.
    rows_per_column = (len(series) + 1) // 2
    for j, (_, label, colour) in enumerate(series):
        lx = x0 + 8 + (j // rows_per_column) * (w / 2)
        ly = y0 + h + 40 + (j % rows_per_column) * 16
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(text(lx + 14, ly, label, 10, "start"))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py ROWS.json OUT.svg")
    with open(sys.argv[1]) as f:
        data = json.load(f)
    rows = data["rows"]
    for r in rows:
        r.setdefault("driver", "unary")
    groups = sorted({r["workers"] for r in rows})
    drivers = []
    for r in rows:
        if r["driver"] not in drivers:
            drivers.append(r["driver"])

    def row(n, driver, mode):
        return next((r for r in rows if r["workers"] == n and r["driver"] == driver
                     and r["mode"] == mode), None)

    def rate(n, key):
        driver, mode = key
        r = row(n, driver, mode)
        return r["completions_per_s"] if r else None

    def latency(n, key):
        driver, quantile = key
        r = row(n, driver, "sustained")
        return r[quantile] if r else None

    width, height = 960, 470
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    svg += bars_panel(80, 50, 370, 300, groups, series_for(drivers, MODES), rate,
                      "completions/s (one shardq serve)", "completions/s")
    svg += bars_panel(570, 50, 370, 300, groups, series_for(drivers, QUANTILES), latency,
                      "take latency, sustained runs", "ms (log)", log=True)
    note = data.get("load", "")
    if note:
        svg.append(text(width / 2, height - 12, note, 11))
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
