"""Draw docs/architecture.svg from the code: the gateway's rooms in the order they stand on each
other (``ROOM_ORDER`` in tests/test_layers.py, which the tests enforce), the dialect library,
and the back end's parts, with the paths a statement and a stream's data take.

    python scripts/draw_architecture.py            # rewrites docs/architecture.svg
    python scripts/draw_architecture.py --check    # exit 1 if the picture is out of date
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from html import escape

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_layers import ROOM_ORDER  # noqa: E402 - the order the tests enforce

OUT = ROOT / "docs" / "architecture.svg"

# one line per room: what it holds (the room's __init__.py says it at length)
ROOMS = {
    "__init__": "", "__main__": "",
    "clock": "the one clock", "durable": "durable files", "config": "the server's flags",
    "catalog_files": "catalog JSON",
    "pgwire": "protocol core (sans I/O), messages, types, auth, row and COPY encoding",
    "link": "the back end's link: frames out and in, a query's live rows, spill",
    "tables": "DuckDB store, pg_catalog, translation, settings, StatementContext",
    "security": "roles, privileges, what a statement may read, server files",
    "syntax": "the session's own statements: lexer, commands, roles",
    "clearinghouse": "slack, watermarks, BOUNDARY, shedding, logs, spools",
    "archive": "Parquet per stream, Spark over the past, priming, late reach",
    "spark_engine": "continuous queries on Spark Structured Streaming",
    "streams": "registry, stream DDL, INSERT, queries, EXPLAIN",
    "connectors": "CDC sources, sinks, secrets",
    "system_views": "the live catalog one session sees, pg_stat_activity, cq_*",
    "services": "the running parts statements may use",
    "sources": "the source seam; the ingest port and wrappers",
    "sessions": "connection shell, session, commands, cursors, COPY",
    "process": "server lifecycle, CLI, metrics and console",
}
BACKEND = [
    ("plan.py · wire.py", "the contract: the algebra's dataclasses; frames"),
    ("backend.py", "the process's loop: frames in, result batches out"),
    ("graph/", "lowering, one shared running graph, one-time queries"),
    ("windows/", "one home per window kind: interval, reach, operator"),
    ("operators/", "σ μ ⋈ ∪ α δ −, aggregates/, patterns/, QJoin"),
]

ROW_H, TOP, LEFT, WIDTH = 34, 72, 170, 500


def _box(x, y, w, h, cls):
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" class="{cls}"/>'


def _text(x, y, text, cls):
    return f'<text x="{x}" y="{y}" class="{cls}">{escape(text)}</text>'


def draw() -> str:
    levels = [sorted(r for r in rooms if ROOMS.get(r)) for rooms in reversed(ROOM_ORDER)]
    levels = [lv for lv in levels if lv]
    height = TOP + len(levels) * ROW_H + 40
    parts = [_box(LEFT - 10, 20, WIDTH + 20, height - 30, "process"),
             _text(LEFT, 42, "gateway process (asyncio) — gateway/", "title"),
             _text(LEFT, 58, "each room imports only the rooms below it (tests/test_layers.py)",
                   "note")]
    y = TOP
    pos = {}
    modules = ("clock", "durable", "config", "catalog_files", "services")
    for rooms in levels:
        name = " · ".join(r + (".py" if r in modules else "/") for r in rooms)
        note = "; ".join(ROOMS[r] for r in rooms)
        parts += [_box(LEFT, y, WIDTH, ROW_H - 6, "room"),
                  _text(LEFT + 8, y + 12, name, "room-name"),
                  _text(LEFT + 8, y + 24, note, "note")]
        for r in rooms:
            pos[r] = y + (ROW_H - 6) / 2
        y += ROW_H
    bx = LEFT + WIDTH + 60
    parts += [_box(bx - 10, 20, 330, 40 + len(BACKEND) * 46, "process"),
              _text(bx, 45, "back-end process — executor/", "title")]
    for i, (name, note) in enumerate(BACKEND):
        by = 60 + i * 46
        parts += [_box(bx, by, 310, 38, "room"), _text(bx + 8, by + 15, name, "room-name"),
                  _text(bx + 8, by + 30, note, "note")]
    dy = 80 + len(BACKEND) * 46
    parts += [_box(bx, dy, 310, 52, "lib"),
              _text(bx + 8, dy + 18, "dialect/ (a library)", "room-name"),
              _text(bx + 8, dy + 34, "sqlglot dialect cql, window kinds, planner:", "note"),
              _text(bx + 8, dy + 47, "SQL → the temporal algebra", "note")]
    # the paths: clients and sources in, the link to the back end, the planner
    cy, sy = pos["sessions"] - 40, pos["sources"] + 50
    parts += [_text(20, cy - 16, "clients", "title"),
              _text(20, cy, "psql, JDBC, ODBC,", "note"),
              _text(20, cy + 14, "psycopg, asyncpg …", "note"),
              f'<path d="M 135 {cy - 18} L {LEFT - 2} {pos["sessions"]}" class="flow"/>',
              _text(20, sy, "sources", "title"),
              _text(20, sy + 16, "lines, CSV, JSON", "note"),
              f'<path d="M 110 {sy - 4} L {LEFT - 2} {pos["sources"]}" class="flow"/>',
              f'<path d="M {LEFT + WIDTH} {pos["link"]} L {bx - 12} 79" class="flow"/>',
              _text(LEFT + WIDTH + 8, pos["link"] - 8, "plans, batches,", "edge-label"),
              _text(LEFT + WIDTH + 8, pos["link"] + 14, "watermarks ⇄ rows", "edge-label"),
              f'<path d="M {LEFT + WIDTH} {pos["streams"]} L {bx - 2} {dy + 26}" '
              'class="flow"/>',
              _text(LEFT + WIDTH + 8, pos["streams"] - 6, "plan", "edge-label")]
    width = bx + 340
    style = """<style>
      .process { fill: #f4f6fa; stroke: #5b6b8c; stroke-width: 1.5; }
      .room { fill: #ffffff; stroke: #8a97b3; stroke-width: 1; }
      .lib { fill: #fff8e8; stroke: #c9a24a; stroke-width: 1.2; }
      .title { font-weight: bold; font-size: 14px; }
      .room-name { font-weight: bold; font-family: DejaVu Sans Mono, monospace; font-size: 12px; }
      .note { fill: #444; font-size: 10.5px; }
      .flow { stroke: #444; stroke-width: 1.4; fill: none; marker-end: url(#arrow); }
      .edge-label { fill: #333; font-size: 11px; font-style: italic; }
    </style>"""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, '
            'sans-serif" font-size="13">\n  <defs>\n    <marker id="arrow" viewBox="0 0 10 10" '
            'refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">\n'
            '      <path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/>\n    </marker>\n    '
            + style + "\n  </defs>\n  " + "\n  ".join(parts) + "\n</svg>\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    svg = draw()
    if args.check:
        sys.exit(0 if OUT.read_text() == svg else 1)
    OUT.write_text(svg)


if __name__ == "__main__":
    main()
