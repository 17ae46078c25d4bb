#!/usr/bin/env python3
"""The benchmark's charts, drawn from the tables of ``bench/RESULTS.md`` into SVG files
that the report embeds: what people would rather look at than read.

    bench/charts/cpu-per-chunk.svg   CPU per chunk of every client, one panel per workload,
                                     panto's rows against the peers of the same run
    bench/charts/concurrency.svg     threads, added p99 latency and CPU per event against
                                     the number of concurrent streams (the paced-streams
                                     table and the scale workload's)

The charts are drawn from the report itself, the committed data (the samples file is not
committed), so they exist without measuring again: ``bench/run.py --charts-only`` (or
``python3 bench/svg.py``) redraws them and their section of the report; ``run.py`` calls
``update`` after every report it writes; ``python3 bench/svg.py --check`` (in
``scripts/test.sh``) fails when the committed charts are not what the report draws. Plain SVG written by hand: no plotting library,
no network, no browser. The output depends only on the report (no dates), so redrawing
an unchanged report changes nothing.
"""

from __future__ import annotations

import math
import os
import re
import sys
from html import escape
from typing import Dict, List, Optional, Sequence, Tuple

CHARTS_BEGIN = "<!-- charts:begin (drawn by bench/svg.py from the tables below) -->"
CHARTS_END = "<!-- charts:end -->"
CHARTS_DIR = "charts"
CPU_SVG = "cpu-per-chunk.svg"
CONC_SVG = "concurrency.svg"

FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
PANTO = "#1f6feb"
PEER = "#9aa4b2"
# Series colours of the concurrency chart, in order of first appearance.
PALETTE = ["#1f6feb", "#d1242f", "#1a7f37", "#8250df", "#bf8700", "#0a7ea4", "#e16f24", "#57606a",
           "#bc4c00", "#116329"]


# ---- reading the report ------------------------------------------------------------------

class Table:
    """One markdown table of the report, under the ``## `` heading it follows."""

    def __init__(self, heading: str, header: List[str], rows: List[List[str]]) -> None:
        self.heading = heading
        self.header = header
        self.rows = rows

    def col(self, *names: str) -> Optional[int]:
        for name in names:
            for i, h in enumerate(self.header):
                if h.strip().lower() == name.lower():
                    return i
        return None


def cells(line: str) -> List[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(report: str) -> List[Table]:
    out: List[Table] = []
    heading = ""
    lines = report.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            heading = line[3:].strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|\s*-{3}", lines[i + 1]):
            header = cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(cells(lines[i]))
                i += 1
            out.append(Table(heading, header, rows))
            continue
        i += 1
    return out


def number(text: str) -> Optional[float]:
    m = re.match(r"^\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*$", text.replace("**", ""))
    return float(m.group(1).replace(",", "")) if m else None


def plain(text: str) -> str:
    """A cell as text: no bold, no code quotes."""
    return text.replace("**", "").replace("`", "")


def cpu_panels(ts: List[Table]) -> List[Tuple[str, List[Tuple[str, str, float, str, bool]]]]:
    """(title, [(language, client, µs per chunk, vs peer, is panto)]) per workload table."""
    panels = []
    for t in ts:
        c_cpu, c_vs, c_lang, c_client = t.col("CPU µs/chunk"), t.col("vs peer"), t.col("language"), t.col("client")
        if c_cpu is None or c_lang is None or c_client is None:
            continue
        rows = []
        for r in t.rows:
            v = number(r[c_cpu]) if c_cpu < len(r) else None
            if v is None or v <= 0:
                continue
            rows.append((r[c_lang], plain(r[c_client]), v, plain(r[c_vs]) if c_vs is not None else "",
                         "**" in r[c_client]))
        if rows:
            panels.append((t.heading, rows))
    return panels


def series_name(language: str, client: str) -> str:
    return f"{language}: {client}"


def is_panto(name: str) -> bool:
    """Whether a series (``language: client``) is one of panto's rows."""
    return name.split(": ", 1)[-1].startswith("panto")


def conc_series(ts: List[Table]) -> Dict[str, Dict[int, Dict[str, float]]]:
    """{series: {streams: {"threads", "p99", "cpu"}}} from every table with a streams
    column. A scale row whose client name extends a paced row's (``…, `async for```, ``…
    (no client work)``) continues that row's series; a (series, streams) point seen twice
    keeps its first table's."""
    out: Dict[str, Dict[int, Dict[str, float]]] = {}
    for t in ts:
        c_streams = t.col("streams")
        c_lang, c_client = t.col("language"), t.col("client")
        if c_streams is None or c_lang is None or c_client is None:
            continue
        cols = {"threads": t.col("threads"), "p99": t.col("added p99 ms"), "cpu": t.col("CPU µs/event")}
        for r in t.rows:
            n = number(r[c_streams]) if c_streams < len(r) else None
            if n is None:
                continue
            name = series_name(r[c_lang], plain(r[c_client]))
            for known in list(out):
                if name != known and (name.startswith(known + ", ") or name.startswith(known + " (")):
                    name = known
                    break
            point = {}
            for key, c in cols.items():
                v = number(r[c]) if c is not None and c < len(r) else None
                if v is not None:
                    point[key] = v
            if point:
                out.setdefault(name, {}).setdefault(int(n), point)
    return out


# ---- drawing -------------------------------------------------------------------------------

def fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


class LogAxis:
    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.d0 = math.floor(math.log10(lo))
        self.d1 = math.ceil(math.log10(hi))
        if self.d1 == self.d0:
            self.d1 += 1
        self.a, self.b = a, b

    def __call__(self, v: float) -> float:
        f = (math.log10(v) - self.d0) / (self.d1 - self.d0)
        return self.a + f * (self.b - self.a)

    def ticks(self) -> List[float]:
        return [10.0 ** d for d in range(self.d0, self.d1 + 1)]


def tick_label(v: float, unit: str = "") -> str:
    text = f"{v:,.0f}" if v >= 1 else f"{v:g}"
    return text + (f" {unit}" if unit else "")


def text(x: float, y: float, s: str, size: int = 12, anchor: str = "start", weight: str = "normal",
         fill: str = "#24292f") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" fill="{fill}">{escape(s)}</text>')


def svg_doc(width: int, height: int, body: List[str], title: str) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT} role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        *body,
        "</svg>",
    ]) + "\n"


def cpu_chart(panels) -> str:
    label_w, plot_w, value_w = 360, 400, 230
    row_h, head_h, gap = 18, 40, 22
    width = label_w + plot_w + value_w + 20
    all_values = [v for _, rows in panels for _, _, v, _, _ in rows]
    axis = LogAxis(min(all_values), max(all_values), label_w, label_w + plot_w)
    body: List[str] = [
        text(10, 22, "Client CPU per streamed chunk (µs, log scale): panto's rows against the peers "
                     "of the same run", 14, weight="bold"),
        text(10, 40, "Blue: panto. Grey: the client each language's users would otherwise pick, "
                     "and the floors. Ratio: panto ÷ peer (below 1 favours panto).", 11, fill="#57606a"),
    ]
    y = 56
    for title, rows in panels:
        body.append(text(10, y + 16, title, 13, weight="bold"))
        top = y + head_h - 14
        bottom = top + row_h * len(rows)
        for t in axis.ticks():
            x = axis(t)
            body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#d0d7de" '
                        f'stroke-width="1"/>')
            body.append(text(x, bottom + 12, tick_label(t, "µs"), 10, "middle", fill="#57606a"))
        for i, (lang, client, v, vs, is_panto) in enumerate(rows):
            ry = top + i * row_h
            body.append(text(label_w - 8, ry + 13, f"{lang} · {client}", 11, "end",
                             weight="bold" if is_panto else "normal"))
            x0, x1 = axis.a, axis(v)
            body.append(f'<rect x="{x0:.1f}" y="{ry + 3}" width="{max(x1 - x0, 1):.1f}" height="{row_h - 6}" '
                        f'fill="{PANTO if is_panto else PEER}"/>')
            note = fmt(v) + (f"  ({vs})" if vs else "")
            body.append(text(label_w + plot_w + 8, ry + 13, note, 11))
        y = bottom + gap + 12
    return svg_doc(width, y, body, "Client CPU per streamed chunk, panto against its peers")


def conc_chart(series: Dict[str, Dict[int, Dict[str, float]]]) -> str:
    metrics = [("threads", "Peak OS threads", ""), ("p99", "Added latency p99 (ms)", "ms"),
               ("cpu", "CPU per event (µs)", "µs")]
    pw, ph, ml, mt, gap = 290, 240, 64, 64, 84
    width = ml + len(metrics) * (pw + gap) + 10
    names = list(series)
    colours = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    xs = sorted({n for s in series.values() for n in s})
    body: List[str] = [
        text(10, 22, "Against the number of concurrent streams (log scales), from the paced-streams "
                     "and scale tables", 14, weight="bold"),
        text(10, 40, "Each line is one client (solid: panto; dashed, hollow: a peer or a floor). Up to "
                     "1,000 streams: 50 chunks 20 ms apart; beyond: the scale workload's pacing (its "
                     "section says). A 0 is not drawn.", 11, fill="#57606a"),
    ]
    xaxis_lo, xaxis_hi = min(xs), max(xs)
    for k, (key, title, unit) in enumerate(metrics):
        left = ml + k * (pw + gap)
        values = [p[key] for s in series.values() for p in s.values() if p.get(key, 0) > 0]
        if not values:
            continue
        xa = LogAxis(xaxis_lo, xaxis_hi, left, left + pw)
        ya = LogAxis(min(values), max(values), mt + ph, mt)
        body.append(text(left + pw / 2, mt - 10, title, 12, "middle", weight="bold"))
        body.append(f'<rect x="{left}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#d0d7de"/>')
        for t in xa.ticks():
            x = xa(t)
            body.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#eaeef2"/>')
            body.append(text(x, mt + ph + 14, tick_label(t), 10, "middle", fill="#57606a"))
        for t in ya.ticks():
            y = ya(t)
            body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eaeef2"/>')
            body.append(text(left - 4, y + 3, tick_label(t, unit), 10, "end", fill="#57606a"))
        body.append(text(left + pw / 2, mt + ph + 30, "concurrent streams", 11, "middle", fill="#57606a"))
        for name in names:
            pts = [(n, p[key]) for n, p in sorted(series[name].items()) if p.get(key, 0) > 0]
            if not pts:
                continue
            coords = [(xa(n), ya(v)) for n, v in pts]
            ours = is_panto(name)
            if len(coords) > 1:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
                dash = "" if ours else ' stroke-dasharray="5,3"'
                body.append(f'<polyline points="{path}" fill="none" stroke="{colours[name]}" stroke-width="2"{dash}/>')
            for x, y in coords:
                fill = colours[name] if ours else "#ffffff"
                body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{fill}" stroke="{colours[name]}" '
                            f'stroke-width="1.5"/>')
    # The legend, two columns under the panels.
    ly = mt + ph + 52
    col_w = (width - 20) / 2
    for i, name in enumerate(names):
        x = 10 + (i % 2) * col_w
        y = ly + (i // 2) * 17
        fill = colours[name] if is_panto(name) else "#ffffff"
        body.append(f'<rect x="{x:.1f}" y="{y - 9}" width="12" height="10" fill="{fill}" '
                    f'stroke="{colours[name]}" stroke-width="1.5"/>')
        body.append(text(x + 18, y, name, 11))
    height = int(ly + ((len(names) + 1) // 2) * 17 + 10)
    return svg_doc(width, height, body, "Threads, added p99 latency and CPU per event against concurrent streams")


# ---- the report's section ------------------------------------------------------------------

def section() -> List[str]:
    return [
        CHARTS_BEGIN,
        "## Charts",
        "",
        "Drawn from this report's tables by `bench/svg.py` (`bench/run.py --charts-only` redraws "
        "them from the committed report without measuring).",
        "",
        f"![Client CPU per streamed chunk, panto against its peers]({CHARTS_DIR}/{CPU_SVG})",
        "",
        f"![Threads, added p99 latency and CPU per event against concurrent streams]({CHARTS_DIR}/{CONC_SVG})",
        CHARTS_END,
    ]


def embed(report: str) -> str:
    """The report with its charts section (replaced, or put before the first table's
    section, after "How to read this")."""
    lines = report.rstrip("\n").split("\n")
    if CHARTS_BEGIN in lines and CHARTS_END in lines:
        a, b = lines.index(CHARTS_BEGIN), lines.index(CHARTS_END)
        lines = lines[:a] + section() + lines[b + 1:]
    else:
        after = next((i for i, x in enumerate(lines) if x.startswith("## How to read")), -1)
        at = next((i for i, x in enumerate(lines) if i > after and x.startswith("## ")), len(lines))
        lines = lines[:at] + section() + [""] + lines[at:]
    return "\n".join(lines) + "\n"


def update(report_path: str) -> List[str]:
    """Draws the charts of the report at ``report_path`` into ``charts/`` beside it and
    puts their section in the report. Returns the files written."""
    with open(report_path, encoding="utf-8") as f:
        report = f.read()
    ts = tables(report)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(report_path)), CHARTS_DIR)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    panels = cpu_panels(ts)
    if panels:
        written.append(write(os.path.join(out_dir, CPU_SVG), cpu_chart(panels)))
    series = conc_series(ts)
    if series:
        written.append(write(os.path.join(out_dir, CONC_SVG), conc_chart(series)))
    new = embed(report)
    if new != report:
        with open(report_path, "w", encoding="utf-8") as f:
            f.write(new)
        written.append(report_path)
    return written


def write(path: str, content: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    return path


def check(report_path: str) -> List[str]:
    """The charts (and the report's charts section) that are not what the report's tables
    draw, as messages; redrawn in a scratch copy, nothing here is written."""
    import shutil
    import tempfile

    here = os.path.dirname(os.path.abspath(report_path))
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, os.path.basename(report_path))
        shutil.copyfile(report_path, copy)
        update(copy)
        for name in [os.path.basename(report_path)] + [os.path.join(CHARTS_DIR, f) for f in (CPU_SVG, CONC_SVG)]:
            fresh, committed = os.path.join(tmp, name), os.path.join(here, name)
            if not os.path.exists(fresh):
                continue
            with open(fresh, encoding="utf-8") as f:
                want = f.read()
            try:
                with open(committed, encoding="utf-8") as f:
                    have = f.read()
            except FileNotFoundError:
                have = None
            if have != want:
                problems.append(f"{os.path.relpath(committed)}: not what the report's tables draw "
                                "(run scripts/bench.sh --charts-only)")
    return problems


def main(argv: Sequence[str]) -> int:
    """``svg.py [--check] [REPORT]`` (default: bench/RESULTS.md beside this file)."""
    args = [a for a in argv if a not in ("--charts-only", "--check")]
    path = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
    if "--check" in argv:
        problems = check(path)
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    for p in update(path):
        print(f"wrote {os.path.relpath(p)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
