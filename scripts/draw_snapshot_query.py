"""Draw docs/img/snapshot_query.svg: the readings and alarms of docs/continuous.md's Σ example
on one time axis, the rows of ``temps [RANGE '10 seconds'] LEFT JOIN alarms [RANGE '4
seconds']`` (a padded row holds exactly while its reading has no partner) and of the Top-1
``ORDER BY temp DESC LIMIT 1`` (a row holds while it is the first).

    python scripts/draw_snapshot_query.py [OUT.svg]

Both answers are computed here by evaluating each query at every instant where an input
changes, from the data alone (no cqgate code); the tests check that they are the rows the
server returns for the same example, and that the SVG is current."""
from __future__ import annotations

import datetime as dt
import os
import sys

START = dt.datetime(2026, 11, 1, 10, 0, 0)
READINGS = [(1, 21.5, 0), (2, 26.0, 3), (1, 27.5, 5)]      # node, temp, second
ALARMS = [(1, "high", 2), (2, "high", 9)]                   # node, level, second
RANGE, ALARM_RANGE = 10, 4              # seconds each stays valid

X0, SCALE, SPAN = 170, 28, 18           # x of second 0, pixels a second, seconds drawn
ROW, TOP = 26, 50
COLOURS = {"reading": "#7aa6d6", "alarm": "#d98c8c", "joined": "#5a9e6f", "padded": "#c9c9c9",
           "top": "#f0b35a"}


def _at(second: float) -> str:
    return (START + dt.timedelta(seconds=second)).isoformat(sep=" ")


def _valid(rows: list, size: int) -> list:
    return [(*r[:2], r[2], r[2] + size) for r in rows]


def _pieces(answer) -> list:
    """Rows of ``answer(instant)`` with their intervals: a row holds from the first change
    instant it is in the answer to the first where it is not."""
    spans = _valid(READINGS, RANGE) + _valid(ALARMS, ALARM_RANGE)
    instants = sorted({x for *_, f, t in spans for x in (f, t)})
    out, open_ = [], {}
    for at in instants:
        now = set(answer(at))
        for row in [r for r in open_ if r not in now]:
            out.append((*row, open_.pop(row), at))
        for row in now:
            open_.setdefault(row, at)
    return sorted(out, key=lambda r: (r[-2], r[-1], r))


def left_join(at: float) -> list:
    readings = [r for r in _valid(READINGS, RANGE) if r[2] <= at < r[3]]
    alarms = [a for a in _valid(ALARMS, ALARM_RANGE) if a[2] <= at < a[3]]
    out = []
    for node, temp, *_ in readings:
        partners = [level for n, level, *_ in alarms if n == node]
        out += [(node, temp, level) for level in partners] or [(node, temp, "no alarm")]
    return out


def top_one(at: float) -> list:
    readings = [r for r in _valid(READINGS, RANGE) if r[2] <= at < r[3]]
    return [max(readings, key=lambda r: r[1])[:2]] if readings else []


def rows() -> tuple[list[str], list[str]]:
    """The two answers as docs/continuous.md prints them."""
    joined = [f"{n} | {temp} | {level} | {_at(f)} | {_at(t)}"
              for n, temp, level, f, t in _pieces(left_join)]
    top = [f"{n} | {temp} | {_at(f)} | {_at(t)}" for n, temp, f, t in _pieces(top_one)]
    return joined, top


def _x(second: float) -> float:
    return X0 + second * SCALE


def _bar(add, y, f, t, colour, label=""):
    add(f'<rect x="{_x(f):.0f}" y="{y + 3}" width="{(t - f) * SCALE:.0f}" height="16" rx="3" '
        f'fill="{colour}"/>')
    if label:
        add(f'<text x="{_x(f) + 4:.0f}" y="{y + 15}" font-size="11">{label}</text>')


def svg() -> str:
    out: list = []
    add = out.append
    lines = [("reading", f"node {n}, {temp}", [(f, t, "")]) for n, temp, f, t in
             _valid(READINGS, RANGE)]
    lines += [("alarm", f"alarm node {n}", [(f, t, "")]) for n, _, f, t in
              _valid(ALARMS, ALARM_RANGE)]
    joined = _pieces(left_join)
    for n, temp in [(n, temp) for n, temp, _ in READINGS]:
        lines.append(("joined", f"LEFT JOIN: node {n}, {temp}", [
            (f, t, level) for rn, rt, level, f, t in joined if (rn, rt) == (n, temp)]))
    lines.append(("top", "LIMIT 1 by temp", [(f, t, str(temp)) for _, temp, f, t in
                                             _pieces(top_one)]))
    axis_y = TOP + len(lines) * ROW + 20
    height, width = axis_y + 40, _x(SPAN) + 30
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.0f} {height}" font-family="sans-serif" font-size="13">')
    add(f'<rect width="{width:.0f}" height="{height}" fill="white"/>')
    add('<text x="10" y="24" font-size="15" font-weight="bold">LEFT JOIN and ORDER BY … '
        'LIMIT 1, each row valid while the snapshot gives it</text>')
    for i, (kind, label, bars) in enumerate(lines):
        y = TOP + i * ROW
        add(f'<text x="10" y="{y + 15}">{label}</text>')
        for f, t, text in bars:
            colour = COLOURS["padded"] if text == "no alarm" else COLOURS[kind]
            _bar(add, y, f, t, colour, text)
    add(f'<line x1="{_x(0)}" y1="{axis_y}" x2="{_x(SPAN):.0f}" y2="{axis_y}" stroke="black"/>')
    for s in range(0, SPAN + 1, 1):
        add(f'<line x1="{_x(s):.0f}" y1="{axis_y}" x2="{_x(s):.0f}" y2="{axis_y + 4}" '
            f'stroke="black"/>')
        if s % 3 == 0:
            add(f'<text x="{_x(s):.0f}" y="{axis_y + 20}" text-anchor="middle">'
                f'{_at(s)[14:]}</text>')
    add('</svg>')
    return "\n".join(out) + "\n"


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "docs", "img",
                                                               "snapshot_query.svg")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(svg())


if __name__ == "__main__":
    main()
