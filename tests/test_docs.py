"""The SQL in docs/ is run, not just shown: every page with SQL runs its ```sql blocks against a
real server, in order, and shows exactly what its examples return.
The timeline picture is current and drawn from the rows the server returns, and every link
between the pages leads somewhere."""
import datetime as dt
import importlib.util
import os
import re

import psycopg
import pyarrow as pa
import pytest
import sqlglot

import dialect  # noqa: F401
from continuous import send_source
from dialect.planner import MemoryCatalog, Relation, plan
from executor.graph import RunningQuery
from gateway.syntax.lexer import split

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def blocks(name: str, lang: str) -> list[str]:
    text = open(os.path.join(DOCS, name), encoding="utf-8").read()
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def statements(block: str) -> list[str]:
    """Split as the server does (semicolons inside a StreaQueL loop stay)."""
    return [s.text.strip() for s in split(block)]


def _script(name: str):
    """A drawing program of scripts/, imported as a module."""
    path = os.path.join(os.path.dirname(DOCS), "scripts", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _copied(conn, stmt: str) -> list:
    """The lines a COPY … TO STDOUT writes (a ``text`` block shows them as they are)."""
    with conn.cursor().copy(stmt) as cp:
        data = b"".join(bytes(block) for block in cp)
    return data.decode().splitlines()


def _cell(v) -> str:
    return v.isoformat(sep=" ") if hasattr(v, "isoformat") else str(v)


SPARK_PAGES = ("archive.md", "spark-engine.md")


@pytest.mark.parametrize("doc", ["sql.md", "getting-started.md", "concepts.md",
                                 "reference.md", "continuous.md", "ingest.md", "archive.md",
                                 "patterns.md", "qjoin.md", "spark-engine.md", "flink.md"])
def test_doc_shows_what_runs(start_server, server, doc):
    """The page, in order on one connection: ``sql`` blocks run, a ``source`` block is sent to
    the ingest port as one source, and each ``text`` block is exactly the rows of the last
    statement before it that returned rows (for a COPY … TO STDOUT, the lines it wrote). The
    pages whose examples run on Spark run on the shared server, whose SparkSession the other
    Spark tests use too."""
    sources = os.path.join(os.path.dirname(DOCS), "clients", "sources")
    s = server if doc in SPARK_PAGES else start_server("--wrapper-path", sources)
    text = open(os.path.join(DOCS, doc), encoding="utf-8").read()
    checked = 0
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        last = None
        for lang, body in re.findall(r"```(sql|text|source)\n(.*?)```", text, re.S):
            if lang == "sql":
                for stmt in statements(body):
                    if re.match(r"copy\b.*\bto\s+stdout\b", stmt, re.I | re.S):
                        last = _copied(conn, stmt)
                        continue
                    cur = conn.execute(stmt)
                    if cur.description:
                        last = [" | ".join(_cell(v) for v in r) for r in cur.fetchall()]
            elif lang == "source":
                assert send_source(s.ingest_port, body) == b""
            else:
                assert last == body.strip().splitlines()
                checked += 1
    assert checked == text.count("```text") > 0        # every result block was compared


def test_timeline_picture_is_current_and_shows_the_rows_the_server_returns(tmp_path):
    """scripts/draw_timeline.py computes the intervals on its own; concepts.md's first two
    result blocks (checked against the server above) must be exactly those, and the SVG in
    docs/img must be what the script draws now."""
    draw_timeline = _script("draw_timeline")
    readings, counts = draw_timeline.rows()
    shown = [b.strip().splitlines() for b in blocks("concepts.md", "text")]
    assert shown[0] == readings and shown[1] == counts
    with open(os.path.join(DOCS, "img", "timeline.svg"), encoding="utf-8") as f:
        assert f.read() == draw_timeline.svg(), "run: python scripts/draw_timeline.py"


def test_snapshot_query_picture_is_current_and_shows_the_rows_the_server_returns():
    """scripts/draw_snapshot_query.py evaluates the LEFT JOIN and the LIMIT 1 of
    continuous.md's Σ example at every instant on its own; the page's result blocks (checked
    against the server above) must be exactly those rows, and the SVG what it draws now."""
    drawn = _script("draw_snapshot_query")
    joined, top = drawn.rows()
    shown = [b.strip().splitlines() for b in blocks("continuous.md", "text")]
    assert joined in shown and top in shown
    with open(os.path.join(DOCS, "img", "snapshot_query.svg"), encoding="utf-8") as f:
        assert f.read() == drawn.svg(), "run: python scripts/draw_snapshot_query.py"


def test_pattern_picture_is_current_and_its_match_is_what_the_server_returns():
    """scripts/draw_pattern.py decides which tags match on its own; the SVG in docs/img must
    be what it draws now, and patterns.md's result (checked against the server above) must
    be the one tag it calls a match."""
    draw_pattern = _script("draw_pattern")
    with open(os.path.join(DOCS, "img", "pattern.svg"), encoding="utf-8") as f:
        assert f.read() == draw_pattern.svg(), "run: python scripts/draw_pattern.py"
    matched = [t for t, why in draw_pattern.verdicts().items() if why.startswith("match")]
    shown = blocks("patterns.md", "text")[0].strip().splitlines()
    assert [int(line.split(" | ")[0]) for line in shown] == matched


def test_quiet_key_picture_is_current_and_is_what_the_executor_sends(tmp_path):
    """scripts/draw_quiet_key.py cuts each reading at the BOUNDARYs on its own; the back end's
    operators, fed the same readings and BOUNDARYs, must send exactly those rows."""
    drawn = _script("draw_quiet_key")
    with open(os.path.join(DOCS, "img", "quiet_key.svg"), encoding="utf-8") as f:
        assert f.read() == drawn.svg(), "run: python scripts/draw_quiet_key.py"
    catalog = MemoryCatalog().add(Relation("temps", "stream", (
        ("node", "INT"), ("temp", "DOUBLE"), ("t", "TIMESTAMP")), "t"))
    q = RunningQuery(plan(sqlglot.parse_one(
        "SELECT node, temp, valid_from, valid_to FROM temps [PARTITION BY node ROWS 1]",
        read="cql"), catalog))
    us = 1_000_000
    events = sorted([(s, "reading", (n, v)) for n, v, s in drawn.READINGS]
                    + [(b, "boundary", None) for b in drawn.BOUNDARIES])
    out = []
    for second, kind, reading in events:
        if kind == "boundary":
            out += q.watermark("temps", int(second * us))
            continue
        out += q.push("temps", pa.RecordBatch.from_pydict({
            "node": pa.array([reading[0]], pa.int32()), "temp": [reading[1]],
            "t": pa.array([int(second * us)], pa.int64()).cast(pa.timestamp("us"))}))
    epoch = dt.datetime(1970, 1, 1)
    sent = sorted((r["node"], r["temp"], (r["valid_from"] - epoch).total_seconds(),
                   (r["valid_to"] - epoch).total_seconds())
                  for b in out for r in b.to_pylist())
    assert sent == sorted(drawn.pieces())


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_architecture_picture_is_current_and_shows_every_room():
    """docs/architecture.svg is drawn from the room order tests/test_layers.py enforces."""
    draw = _script("draw_architecture")
    svg = draw.draw()
    assert open(os.path.join(DOCS, "architecture.svg"), encoding="utf-8").read() == svg
    rooms = {r for level in draw.ROOM_ORDER for r in level} - {"__init__", "__main__"}
    assert all(r in svg for r in rooms), [r for r in rooms if r not in svg]


def test_links_between_pages_lead_somewhere():
    root = os.path.dirname(DOCS)
    pages = [os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md")]
    pages += [os.path.join(root, "README.md"), os.path.join(root, "clients", "README.md"),
              os.path.join(DOCS, "benchmarks", "README.md")]
    checked = 0
    for page in pages:
        text = open(page, encoding="utf-8").read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            assert os.path.exists(full), f"{os.path.relpath(page, root)}: {target}"
            if anchor:
                body = open(full, encoding="utf-8").read()
                heads = {_slug(h) for h in re.findall(r"^#+ (.*)$", body, re.M)}
                assert anchor in heads, f"{os.path.relpath(page, root)}: {target}"
            checked += 1
    assert checked >= 30
