"""The SQL in docs/ is run, not just shown: every ```sql block of docs/dialect.md and
docs/sql.md runs against a real server, in order, and the printed plan in dialect.md is what
EXPLAIN prints; docs/continuous.md, docs/ingest.md and docs/archive.md show exactly what
their examples return."""
import os
import re

import psycopg
import pytest

from continuous import send_source
from gateway.sql.lexer import split

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def blocks(name: str, lang: str) -> list[str]:
    text = open(os.path.join(DOCS, name), encoding="utf-8").read()
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def statements(block: str) -> list[str]:
    """Split as the server does (semicolons inside a StreaQueL loop stay)."""
    return [s.text.strip() for s in split(block)]


@pytest.mark.parametrize("doc", ["dialect.md", "sql.md"])
def test_doc_sql_runs(start_server, doc):
    s = start_server()
    outputs = []
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        for block in blocks(doc, "sql"):
            for stmt in statements(block):
                cur = conn.execute(stmt)
                if cur.description:
                    outputs.append([r[0] for r in cur.fetchall()])
    if doc == "dialect.md":
        shown = blocks(doc, "text")[0].strip().splitlines()
        assert shown in outputs
        assert all(out[0].startswith("continuous query") for out in outputs)


def _cell(v) -> str:
    return v.isoformat(sep=" ") if hasattr(v, "isoformat") else str(v)


@pytest.mark.parametrize("doc", ["continuous.md", "ingest.md", "archive.md"])
def test_doc_shows_what_runs(start_server, server, doc):
    """The page, in order on one connection: ``sql`` blocks run, a ``source`` block is sent to
    the ingest port as one source, and each ``text`` block is exactly the rows of the last
    statement before it that returned rows. The archive page runs on the shared server, whose
    SparkSession the other Spark tests use too."""
    sources = os.path.join(os.path.dirname(DOCS), "clients", "sources")
    s = server if doc == "archive.md" else start_server(env={"PYTHONPATH": sources})
    text = open(os.path.join(DOCS, doc), encoding="utf-8").read()
    checked = 0
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        last = None
        for lang, body in re.findall(r"```(sql|text|source)\n(.*?)```", text, re.S):
            if lang == "sql":
                for stmt in statements(body):
                    cur = conn.execute(stmt)
                    if cur.description:
                        last = [" | ".join(_cell(v) for v in r) for r in cur.fetchall()]
            elif lang == "source":
                assert send_source(s.ingest_port, body) == b""
            else:
                assert last == body.strip().splitlines()
                checked += 1
    assert checked == text.count("```text") > 0        # every result block was compared
