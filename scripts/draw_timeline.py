"""Draw docs/img/timeline.svg: the readings of docs/concepts.md under [RANGE '10 seconds'], each
valid for [valid_from, valid_to), the COUNT(*) those intervals give, and a snapshot at one instant.

    python scripts/draw_timeline.py [OUT.svg]

The intervals are computed here from the readings alone (no cqgate code), and the tests check
that they are the rows the server returns for the same example, and that the SVG is current."""
from __future__ import annotations

import datetime as dt
import os
import sys

START = dt.datetime(2026, 11, 1, 10, 0, 0)
READINGS = [(1, 21.5, 0), (2, 26.0, 3), (1, 27.5, 5), (2, 24.0, 12)]   # node, temp, second
RANGE = 10                  # seconds a reading stays valid
WATERMARK = 20              # ALTER STREAM temps ADVANCE TO 10:00:20
SNAPSHOT = 6                # the instant the picture reads

X0, SCALE, SPAN = 150, 24, 24          # x of second 0, pixels a second, seconds drawn
ROW, TOP = 30, 50


def _at(second: float) -> str:
    return (START + dt.timedelta(seconds=second)).isoformat(sep=" ")


def intervals() -> list[tuple]:
    """Each reading's (node, temp, valid_from, valid_to) in seconds."""
    return [(node, temp, s, s + RANGE) for node, temp, s in READINGS]


def count_pieces() -> list[tuple]:
    """(n, from, to): COUNT(*) over the valid readings, constant on each piece, up to the
    watermark (a piece still open there is cut at it, as a BOUNDARY does)."""
    edges = sorted({e for _, _, a, b in intervals() for e in (a, b) if e <= WATERMARK}
                   | {WATERMARK})
    pieces = []
    for a, b in zip(edges, edges[1:]):
        n = sum(1 for *_, f, t in intervals() if f <= a < t)
        if pieces and pieces[-1][0] == n and pieces[-1][2] == a:
            pieces[-1] = (n, pieces[-1][1], b)
        elif n:
            pieces.append((n, a, b))
    return pieces


def rows() -> tuple[list[str], list[str]]:
    """The two answers as docs/concepts.md prints them."""
    readings = [f"{node} | {temp} | {_at(f)} | {_at(t)}" for node, temp, f, t in intervals()]
    counts = [f"{n} | {_at(f)} | {_at(t)}" for n, f, t in count_pieces()]
    return readings, counts


def _x(second: float) -> float:
    return X0 + second * SCALE


def svg() -> str:
    out = []
    add = out.append
    n_rows = len(READINGS)
    count_y = TOP + n_rows * ROW + 40
    axis_y = count_y + 60
    height = axis_y + 70
    width = _x(SPAN) + 40
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.0f} {height}" font-family="sans-serif" font-size="13">')
    add(f'<rect width="{width:.0f}" height="{height}" fill="white"/>')
    add(f'<text x="10" y="24" font-size="15" font-weight="bold">temps [RANGE \'10 seconds\']: '
        'each reading holds for [valid_from, valid_to)</text>')
    for i, (node, temp, f, t) in enumerate(intervals()):
        y = TOP + i * ROW
        add(f'<text x="10" y="{y + 15}">node {node}, {temp}</text>')
        add(f'<rect x="{_x(f):.0f}" y="{y + 3}" width="{(t - f) * SCALE:.0f}" height="16" '
            f'rx="3" fill="#7aa6d6"/>')
        add(f'<circle cx="{_x(f):.0f}" cy="{y + 11}" r="4" fill="#1f4e85"/>')
    add(f'<text x="10" y="{count_y + 15}">COUNT(*)</text>')
    for n, f, t in count_pieces():
        h = n * 10
        add(f'<rect x="{_x(f):.0f}" y="{count_y + 30 - h}" width="{(t - f) * SCALE:.0f}" '
            f'height="{h}" fill="#f0b35a" stroke="white"/>')
        add(f'<text x="{_x((f + t) / 2):.0f}" y="{count_y + 30 - h - 4}" '
            f'text-anchor="middle">{n}</text>')
    add(f'<line x1="{_x(0)}" y1="{axis_y}" x2="{_x(SPAN):.0f}" y2="{axis_y}" stroke="black"/>')
    for s in range(0, SPAN + 1, 2):
        add(f'<line x1="{_x(s):.0f}" y1="{axis_y}" x2="{_x(s):.0f}" y2="{axis_y + 5}" '
            f'stroke="black"/>')
        if s % 4 == 0:
            add(f'<text x="{_x(s):.0f}" y="{axis_y + 20}" text-anchor="middle">'
                f'{_at(s)[11:]}</text>')
    held = sum(1 for *_, f, t in intervals() if f <= SNAPSHOT < t)
    for s, colour, label in (
            (SNAPSHOT, "#c0392b", f"snapshot at {_at(SNAPSHOT)[11:]}: {held} readings hold, "
                                  f"COUNT(*) = {held}"),
            (WATERMARK, "#555555", "watermark: the stream's now")):
        add(f'<line x1="{_x(s):.0f}" y1="{TOP - 8}" x2="{_x(s):.0f}" y2="{axis_y}" '
            f'stroke="{colour}" stroke-width="2" stroke-dasharray="5,4"/>')
        anchor = "start" if s == SNAPSHOT else "end"
        dx = 6 if s == SNAPSHOT else -6
        y = axis_y + 40 if s == SNAPSHOT else axis_y + 58
        add(f'<text x="{_x(s) + dx:.0f}" y="{y}" fill="{colour}" text-anchor="{anchor}">'
            f'{label}</text>')
    add('</svg>')
    return "\n".join(out) + "\n"


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "docs", "img",
                                                               "timeline.svg")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg())


if __name__ == "__main__":
    main()
