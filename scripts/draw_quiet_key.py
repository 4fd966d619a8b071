"""Draw docs/img/quiet_key.svg: the latest reading per sensor (``[PARTITION BY node ROWS 1]``)
as the client receives it. A reading's row is open until the sensor's next reading; the stream
splits open rows at each BOUNDARY (at most one a heartbeat), so a sensor that goes quiet still
shows its value, one row per heartbeat, each ``valid_to`` the instant of the split.

    python scripts/draw_quiet_key.py [OUT.svg]

The pieces are computed here from the readings and the BOUNDARY instants alone; the tests
check that the SVG is current."""
from __future__ import annotations

import os
import sys

READINGS = [(1, 21.5, 0.0), (2, 26.0, 0.4), (1, 22.0, 2.3)]   # node, temp, second
BOUNDARIES = [1.0, 2.0, 3.0, 4.0]       # one a heartbeat (1 s): the stream's watermark then
NOW = 4.0                               # what the client has received by then

X0, SCALE, SPAN = 150, 120, 4.5         # x of second 0, pixels a second, seconds drawn
ROW, TOP = 34, 56
COLOURS = ("#7aa6d6", "#9cc28a")


def pieces() -> list[tuple]:
    """(node, temp, valid_from, valid_to) rows received by NOW: each reading valid until the
    node's next one, cut at every BOUNDARY inside, the part after the last one not yet sent."""
    out = []
    for i, (node, temp, start) in enumerate(READINGS):
        end = next((s for n, _, s in READINGS[i + 1:] if n == node), None)
        cuts = [b for b in BOUNDARIES if start < b < (end if end is not None else NOW + 1)]
        edges = [start] + cuts + ([end] if end is not None and end <= NOW else [])
        out += [(node, temp, a, b) for a, b in zip(edges, edges[1:])]
    return out


def svg() -> str:
    width = X0 + int(SPAN * SCALE) + 40
    height = TOP + ROW * len(READINGS) + 90
    x = lambda s: X0 + round(s * SCALE)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             '<text x="10" y="24" font-size="15" font-weight="bold">latest reading per node '
             '[PARTITION BY node ROWS 1]: the rows a client has at 4 s</text>']
    lanes = {(node, temp): k for k, (node, temp, _) in enumerate(READINGS)}
    for (node, temp), k in lanes.items():
        parts.append(f'<text x="10" y="{TOP + k * ROW + 13}">node {node}, {temp}</text>')
    for node, temp, a, b in pieces():
        y = TOP + lanes[(node, temp)] * ROW
        parts.append(f'<rect x="{x(a) + 1}" y="{y}" width="{x(b) - x(a) - 2}" height="18" '
                     f'rx="3" fill="{COLOURS[node - 1]}"/>')
    for node, temp, s in READINGS:
        y = TOP + lanes[(node, temp)] * ROW + 9
        parts.append(f'<circle cx="{x(s)}" cy="{y}" r="4" fill="#1f4e85"/>')
    bottom = TOP + ROW * len(READINGS)
    for b in BOUNDARIES:
        parts.append(f'<line x1="{x(b)}" y1="{TOP - 8}" x2="{x(b)}" y2="{bottom}" '
                     'stroke="#c0392b" stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{x(BOUNDARIES[0]) + 4}" y="{TOP - 12}" fill="#c0392b">'
                 'BOUNDARY (one a heartbeat): open rows are split here</text>')
    axis = bottom + 20
    parts.append(f'<line x1="{X0}" y1="{axis}" x2="{x(SPAN)}" y2="{axis}" stroke="black"/>')
    for s in range(int(SPAN) + 1):
        parts.append(f'<line x1="{x(s)}" y1="{axis}" x2="{x(s)}" y2="{axis + 5}" '
                     'stroke="black"/>')
        parts.append(f'<text x="{x(s)}" y="{axis + 20}" text-anchor="middle">{s} s</text>')
    parts.append(f'<text x="10" y="{axis + 50}">node 2 read once and went quiet: its value '
                 'comes as one row a heartbeat, valid_to the instant of the split</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "img",
        "quiet_key.svg")
    with open(out, "w") as f:
        f.write(svg())
