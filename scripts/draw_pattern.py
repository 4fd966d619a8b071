"""Draw docs/img/pattern.svg: docs/patterns.md's shoplifting pattern on a timeline,
``SEQ(shelf s, !(counter c), exit e) WHERE [tag] WITHIN '1 hour'``: each tag's events on its
own lane, the candidate sequence (shelf → exit) drawn as a line, and why each one did or did
not match (a counter event between them, the window, or none: a theft).

    python scripts/draw_pattern.py [OUT.svg]

Which tags match is decided here from the events alone (by the definition in the docs); the
tests check that the SVG is current and that the server returns the same match."""
from __future__ import annotations

import os
import sys

# the events of docs/patterns.md's example: (stream, tag, minutes after 10:00)
EVENTS = [("shelf", 1, 0), ("shelf", 2, 2), ("shelf", 3, 5), ("counter", 1, 10),
          ("exit", 1, 12), ("exit", 2, 15), ("exit", 3, 90)]
WITHIN = 60                                  # minutes

X0, SCALE, SPAN = 110, 6, 100                # x of 10:00, pixels a minute, minutes drawn
LANE, TOP = 56, 60
COLOURS = {"shelf": "#7aa6d6", "counter": "#e0a050", "exit": "#9cc28a"}


def verdicts() -> dict:
    """tag -> why its shelf → exit sequence did or did not match."""
    out = {}
    for tag in sorted({t for _, t, _ in EVENTS}):
        s = next(m for k, t, m in EVENTS if k == "shelf" and t == tag)
        e = next(m for k, t, m in EVENTS if k == "exit" and t == tag)
        paid = any(k == "counter" and t == tag and s < m < e for k, t, m in EVENTS)
        out[tag] = ("not a match: paid at the counter in between" if paid
                    else "not a match: left after WITHIN 1 hour" if e - s >= WITHIN
                    else "match: known at the exit")
    return out


def svg() -> str:
    tags = sorted({t for _, t, _ in EVENTS})
    width = X0 + SPAN * SCALE + 260
    height = TOP + LANE * len(tags) + 50
    x = lambda m: X0 + m * SCALE  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             '<text x="10" y="24" font-size="15" font-weight="bold">EVENT SEQ(shelf s, '
             '!(counter c), exit e) WHERE [tag] WITHIN \'1 hour\'</text>']
    why = verdicts()
    for i, tag in enumerate(tags):
        y = TOP + i * LANE + 20
        parts.append(f'<text x="10" y="{y + 5}">tag {tag}</text>')
        parts.append(f'<line x1="{X0}" y1="{y}" x2="{x(SPAN)}" y2="{y}" stroke="#ddd"/>')
        mine = [(k, m) for k, t, m in EVENTS if t == tag]
        s = next(m for k, m in mine if k == "shelf")
        e = next(m for k, m in mine if k == "exit")
        match = why[tag].startswith("match")
        dash = "" if match else ' stroke-dasharray="6 4"'
        parts.append(f'<line x1="{x(s)}" y1="{y}" x2="{x(e)}" y2="{y}" '
                     f'stroke="{"#2a7a2a" if match else "#b33"}" stroke-width="3"{dash}/>')
        parts.append(f'<rect x="{x(s)}" y="{y - 17}" width="{WITHIN * SCALE}" height="8" '
                     'fill="#eee" stroke="#bbb"/>')
        for k, m in mine:
            parts.append(f'<circle cx="{x(m)}" cy="{y}" r="7" fill="{COLOURS[k]}" '
                         'stroke="#333"/>')
            parts.append(f'<text x="{x(m) - 8}" y="{y + 24}" font-size="11">{k[0]}</text>')
        parts.append(f'<text x="{x(SPAN) + 12}" y="{y + 5}">{why[tag]}</text>')
    base = TOP + LANE * len(tags) + 10
    for m in range(0, SPAN + 1, 15):
        label = f"{10 + m // 60}:{m % 60:02d}"
        parts.append(f'<text x="{x(m) - 14}" y="{base + 14}" font-size="11">{label}</text>')
    parts.append(f'<text x="10" y="{base + 34}" font-size="11">grey bar: WITHIN 1 hour '
                 'from the shelf event; s shelf, c counter, e exit</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "docs", "img", "pattern.svg")
    with open(out, "w", encoding="utf-8") as f:
        f.write(svg())
