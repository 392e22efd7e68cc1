#!/usr/bin/env python3
"""Draws baton-bench's CSV as plain SVG pictures for Docs/Performance.md (no package needed).

    swift run -c release baton-bench --csv > Docs/performance.csv
    python3 .ci/plot-bench.py Docs/performance.csv Docs/Images

writes performance-cost.svg (per-operation cost against N, one panel per workload: Baton, its
Foundation and GCD baselines) and performance-contention.svg (per-operation cost against the number
of threads creating operations, on their own queues, on one shared queue, or creating only). The output depends
only on the CSV, so `--check` proves that the committed pictures are the committed CSV's.
"""

import csv
import math
import os
import sys

COLORS = {
    "Baton": "#d1495b",
    "BlockOperation": "#00798c",
    "DispatchGroup": "#edae49",
    "TaskGroup": "#66a182",
    "raw-chain-one-call": "#8d6a9f",
    "raw-chain-one-by-one": "#2e4057",
    "Baton chain": "#999999",
}
LABELS = {
    "DispatchGroup": "GCD (DispatchGroup)",
    "TaskGroup": "Swift TaskGroup",
    "raw-chain-one-call": "dependent BlockOperations, one add",
    "raw-chain-one-by-one": "dependent BlockOperations, added one by one",
    "BlockOperation": "independent BlockOperations",
}
COST_PANELS = [
    ("independent", "n independent operations"),
    ("group", "a group of n children"),
    ("sequence", "a sequence of n steps"),
    ("chain", "a chain of n operations"),
]
CONTENTION_PANELS = [
    ("contention-own", "T threads, a queue each"),
    ("contention-shared", "T threads, one shared queue"),
    ("contention-create", "T threads creating only (no queue)"),
]


def read(path):
    """Rows of the CSV as dicts, numbers parsed; rows with a missing time are kept with NaN."""
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            def number(key):
                try:
                    return float(row.get(key) or "nan")
                except ValueError:
                    return float("nan")

            rows.append(
                {
                    "workload": row["workload"],
                    "n": int(row["n"]),
                    "baton": number("baton_seconds"),
                    "baseline": row["baseline"],
                    "base": number("baseline_seconds"),
                    "operations": int(row.get("operations") or row["n"]),
                }
            )
    return rows


def series_for(rows, workload):
    """{series name: [(x, microseconds per operation)]} for one workload's rows."""
    series = {}
    for row in rows:
        if row["workload"] != workload:
            continue
        x, operations = row["n"], row["operations"]
        for name, seconds in (("Baton", row["baton"]), (row["baseline"], row["base"])):
            if name == "baton-chain":
                name = "Baton chain"
            if math.isnan(seconds) or operations <= 0:
                continue
            points = series.setdefault(name, {})
            points[x] = seconds / operations * 1e6
    return {name: sorted(points.items()) for name, points in series.items()}


def nice_ceiling(value):
    """A round number at least `value`, for the top of a y axis."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        top = step * 10**exponent
        if top >= value:
            return top
    return 10 ** (exponent + 1)


def text(x, y, body, size=11, anchor="start", weight="normal", color="#222"):
    body = body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-weight="{weight}" fill="{color}">{body}</text>'
    )


def panel(left, top, width, height, title, series, x_label, log_base):
    """One chart: log-scale x (base `log_base`), linear y in µs per operation from 0."""
    parts = [f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="white" stroke="#ccc"/>']
    parts.append(text(left + width / 2, top - 8, title, size=13, anchor="middle", weight="bold"))
    xs = sorted({x for points in series.values() for x, _ in points})
    ys = [y for points in series.values() for _, y in points]
    if not xs or not ys:
        parts.append(text(left + width / 2, top + height / 2, "no data", anchor="middle"))
        return parts
    low, high = math.log(xs[0], log_base), math.log(xs[-1], log_base)
    span = high - low or 1
    top_value = nice_ceiling(max(ys) * 1.05)

    def at(x, y):
        return (
            left + 10 + (math.log(x, log_base) - low) / span * (width - 20),
            top + height - y / top_value * height,
        )

    for step in range(5):
        value = top_value * step / 4
        _, y = at(xs[0], value)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + width}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(text(left - 6, y + 4, f"{value:g}", size=10, anchor="end", color="#555"))
    for x in xs:
        px, _ = at(x, 0)
        label = f"{x:,}" if x < 10_000 or log_base == 2 else f"10^{round(math.log10(x))}"
        parts.append(f'<line x1="{px:.1f}" y1="{top + height}" x2="{px:.1f}" y2="{top + height + 4}" stroke="#555"/>')
        parts.append(text(px, top + height + 16, label, size=10, anchor="middle", color="#555"))
    parts.append(text(left + width / 2, top + height + 32, x_label, size=11, anchor="middle", color="#555"))
    parts.append(
        text(left - 40, top + height / 2, "µs per operation", size=11, anchor="middle", color="#555").replace(
            "<text ", f'<text transform="rotate(-90 {left - 40} {top + height / 2})" ', 1
        )
    )
    for name in sorted(series, key=lambda name: (name != "Baton", name)):
        color = COLORS.get(name, "#444")
        points = [at(x, y) for x, y in series[name]]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        width_px = 2.5 if name == "Baton" else 1.5
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="{width_px}"/>')
        for x, y in points:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
    return parts


def legend(left, top, names):
    parts = []
    for index, name in enumerate(names):
        y = top + index * 18
        parts.append(f'<rect x="{left}" y="{y - 9}" width="14" height="10" fill="{COLORS.get(name, "#444")}"/>')
        parts.append(text(left + 20, y, LABELS.get(name, name), size=11))
    return parts


def picture(panels, rows, x_label, log_base, columns, caption):
    width, height, gap_x, gap_y = 330, 200, 110, 95
    rows_needed = math.ceil(len(panels) / columns)
    all_series = [series_for(rows, workload) for workload, _ in panels]
    names = sorted({name for series in all_series for name in series}, key=lambda name: (name != "Baton", name))
    legend_height = 18 * len(names) + 20
    total_width = 70 + columns * width + (columns - 1) * gap_x + 30
    total_height = 50 + rows_needed * (height + gap_y) + legend_height
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{total_height}" '
        f'viewBox="0 0 {total_width} {total_height}" font-family="Helvetica, Arial, sans-serif">',
        f'<rect width="{total_width}" height="{total_height}" fill="#fafafa"/>',
        text(total_width / 2, 22, caption, size=14, anchor="middle", weight="bold"),
    ]
    for index, ((workload, title), series) in enumerate(zip(panels, all_series)):
        column, row = index % columns, index // columns
        left = 70 + column * (width + gap_x)
        top = 60 + row * (height + gap_y)
        parts += panel(left, top, width, height, title, series, x_label, log_base)
    parts += legend(70, 50 + rows_needed * (height + gap_y) + 10, names)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(arguments):
    check = "--check" in arguments
    arguments = [argument for argument in arguments if argument != "--check"]
    if len(arguments) != 2:
        sys.stderr.write("usage: plot-bench.py [--check] BENCH.csv OUTPUT-FOLDER\n")
        return 2
    rows = read(arguments[0])
    pictures = {
        "performance-cost.svg": picture(
            COST_PANELS, rows, "n (operations)", 10, 2, "Per-operation cost against n (medians, lower is better)"
        ),
        "performance-contention.svg": picture(
            CONTENTION_PANELS,
            rows,
            "T (threads creating operations)",
            2,
            3,
            "Per-operation cost against the number of threads (medians, lower is better)",
        ),
    }
    stale = []
    for name, body in pictures.items():
        path = os.path.join(arguments[1], name)
        if check:
            try:
                with open(path) as handle:
                    if handle.read() != body:
                        stale.append(name)
            except FileNotFoundError:
                stale.append(name)
        else:
            with open(path, "w") as handle:
                handle.write(body)
    if stale:
        sys.stderr.write(
            "plot-bench: not drawn from the committed CSV: " + ", ".join(stale)
            + " (run: python3 .ci/plot-bench.py Docs/performance.csv Docs/Images)\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
