"""EXPLAIN ANALYZE of a running continuous query, by cursor or window name: each operator's rows
out and in, batches, time and state, counted since the query began (an operator shared with an
older query counts only what came after), agreeing with cq_queries and with the rows the client
received; the oracle for rows is the data pushed (how many rows pass the WHERE). Bad names and
EXPLAIN ANALYZE of a bare stream query are clear errors that leave the session working."""
from __future__ import annotations

import re

import psycopg
import pytest

from continuous import unique

LINE = re.compile(r"^(?P<indent>[ │├└─]*)(?P<label>.+?)  \(actual rows=(?P<rows>\d+) "
                  r"rows_in=(?P<rows_in>\d+) batches=(?P<batches>\d+)"
                  r"(?: time=(?P<ms>[\d.]+) ms)?(?: state=(?P<state>\d+))?"
                  r"(?: shared=(?P<shared>\d+))?\)$")


def _operators(lines: list[str]) -> list[dict]:
    """The operator lines of EXPLAIN ANALYZE's output, parsed (top first)."""
    out = []
    for line in lines:
        m = LINE.match(line)
        if m:
            out.append({k: (int(v) if k not in ("indent", "label", "ms") and v is not None
                            else v) for k, v in m.groupdict().items()})
    return out


def _footer(lines: list[str], key: str) -> str:
    return next(line.split(": ", 1)[1] for line in lines if line.startswith(key + ":"))


def _explain(c, name: str) -> list[str]:
    return [r[0] for r in c.execute(f"EXPLAIN ANALYZE {name}").fetchall()]


def _insert(c, stream: str, values: list[int], second0: int) -> None:
    rows = ", ".join(f"({v}, TIMESTAMP '2026-11-01 00:00:00' + INTERVAL {second0 + i} SECOND)"
                     for i, v in enumerate(values))
    c.execute(f"INSERT INTO {stream} VALUES {rows}")


def test_counters_agree_with_cq_queries_and_the_rows_the_client_read(server):
    stream = unique("ea")
    first = [3, -1, 4, -1, 5, 9, -2, 6]                  # 5 pass the WHERE
    later = [7, -3, 8, 2, -8]                             # 3 more
    with psycopg.connect(server.dsn, autocommit=True) as c, psycopg.connect(server.dsn) as r:
        c.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        r.execute(f"DECLARE old_one CURSOR FOR SELECT a, a * 2 AS b FROM {stream} "
                  "[RANGE '1 minute'] WHERE a > 0")
        _insert(c, stream, first, 0)
        read = r.execute("FETCH 3 FROM old_one WITH (timeout = '5s')").fetchall()
        assert len(read) == 3
        # a second, identical query shares the scan, window and σ of the first
        r.execute(f"DECLARE new_one CURSOR FOR SELECT a, a * 2 AS b FROM {stream} "
                  "[RANGE '1 minute'] WHERE a > 0")
        _insert(c, stream, later, len(first))
        read += r.execute("FETCH 4 FROM old_one WITH (timeout = '5s')").fetchall()
        assert len(read) == 7

        lines = _explain(r, "old_one")
        assert lines[0].startswith("continuous query (back end) → a, b"), lines
        ops = _operators(lines)
        assert len(ops) == len(lines) - 1 - sum(1 for ln in lines if ":" in ln.split("(")[0]), \
            lines
        top, scan = ops[0], ops[-1]
        passed = sum(v > 0 for v in first + later)
        assert scan["label"].startswith(f"stream {stream}") and \
            scan["rows_in"] == len(first) + len(later), lines
        where = next(o for o in ops if o["label"].startswith("σ"))
        assert where["rows_in"] == len(first) + len(later) and where["rows"] == passed
        assert top["rows"] == passed and top["indent"] == ""
        assert all(o["ms"] is not None and o["batches"] >= 1 for o in ops)
        assert where["shared"] == 2                         # both cursors read it
        assert _footer(lines, "Rows out") == \
            f"{passed} (read by the client: 7, waiting: {passed - 7})"
        assert _footer(lines, "Query") == "cursor old_one, backend"
        listed = c.execute("SELECT rows_out, rows_in FROM cq_queries WHERE name = 'old_one' "
                           "AND pid = %s", [r.info.backend_pid]).fetchone()
        assert listed == (passed, len(first) + len(later))
        assert _footer(lines, "Rows in") == str(len(first) + len(later))
        rest = r.execute("FETCH ALL FROM old_one WITH (timeout = '1s')").fetchall()
        assert len(read) + len(rest) == passed == top["rows"]

        # the newer cursor counts only what came after it began, on the shared operators too
        newer = _operators(_explain(r, "new_one"))
        assert newer[-1]["rows_in"] == len(later)
        assert next(o for o in newer if o["label"].startswith("σ"))["rows"] == \
            sum(v > 0 for v in later) == newer[0]["rows"]
        r.execute("CLOSE new_one")
        r.execute("CLOSE old_one")


def test_a_windows_aggregate_shows_its_state(server):
    stream = unique("ea_w")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute(f"CREATE WINDOW {stream}_counts AS SELECT a % 3 AS k, count(*) AS n "
                  f"FROM {stream} [RANGE '1 hour'] GROUP BY a % 3")
        _insert(c, stream, list(range(10)), 0)
        lines = _explain(c, f"{stream}_counts")
        ops = _operators(lines)
        assert _footer(lines, "Query") == f"window {stream}_counts, backend"
        aggregate = next(o for o in ops if o["label"].startswith("α"))
        assert "over ω range" in aggregate["label"]          # fused with its window
        assert aggregate["rows_in"] == 10 and aggregate["state"] >= 3, lines
        listed = c.execute("SELECT rows_out, state_size FROM cq_queries WHERE name = %s",
                           [f"{stream}_counts"]).fetchone()
        assert listed[0] == ops[0]["rows"]
        assert listed[1] == sum(o["state"] or 0 for o in ops)
        c.execute(f"DROP WINDOW {stream}_counts")


def test_bad_names_and_bare_stream_queries_are_clear_errors(server):
    stream = unique("ea_e")
    with psycopg.connect(server.dsn, autocommit=True) as c, \
            psycopg.connect(server.dsn) as other:
        c.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        other.execute(f"DECLARE theirs CURSOR FOR SELECT a FROM {stream}")
        with pytest.raises(psycopg.Error) as e:
            c.execute("EXPLAIN ANALYZE nothing_here")
        assert e.value.sqlstate == "34000"
        assert e.value.diag.message_primary == \
            'no continuous query named "nothing_here" is running'
        assert e.value.diag.statement_position == "17"
        with pytest.raises(psycopg.Error) as e:               # another session's cursor
            c.execute("EXPLAIN ANALYZE theirs")
        assert e.value.sqlstate == "34000"
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"EXPLAIN ANALYZE SELECT a FROM {stream}")
        assert e.value.sqlstate == "0A000" and "DECLARE" in e.value.diag.message_hint
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"EXPLAIN ANALYZE {stream}")              # a stream runs no query
        assert e.value.sqlstate == "34000"
        # a table query's EXPLAIN ANALYZE is DuckDB's, run
        c.execute(f"CREATE TABLE {stream}_t (x INT)")
        c.execute(f"INSERT INTO {stream}_t VALUES (1), (2)")
        plan = "\n".join(r[0] for r in c.execute(
            f"EXPLAIN ANALYZE SELECT count(*) FROM {stream}_t").fetchall())
        assert plan.startswith("table query (DuckDB)") and "Total Time" in plan, plan
        assert "Total Time" in "\n".join(r[0] for r in c.execute(
            "EXPLAIN ANALYZE VALUES (1), (2)").fetchall())
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"EXPLAIN ANALYZE RECOMPUTE SELECT a FROM {stream} [RANGE '1 minute']")
        assert e.value.sqlstate == "0A000"
        # ANALYZE would run it: a change, or a query that changes something, is refused
        for changing in (f"INSERT INTO {stream}_t VALUES (3)",
                         f"WITH d AS (DELETE FROM {stream}_t RETURNING *) SELECT * FROM d",
                         f"WITH i AS (INSERT INTO {stream}_t VALUES (4) RETURNING *) "
                         "SELECT * FROM i",
                         f"SELECT * INTO {stream}_copy FROM {stream}_t"):
            with pytest.raises(psycopg.Error) as e:
                c.execute(f"EXPLAIN ANALYZE {changing}")
            assert e.value.sqlstate == "0A000", changing
        assert c.execute(f"SELECT count(*) FROM {stream}_t").fetchone() == (2,)
        assert c.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = "
                         f"'{stream}_copy'").fetchone() == (0,)
        # PostgreSQL's option list: bad options are syntax errors, never internal ones
        for bad in ("EXPLAIN (", "EXPLAIN ()", "EXPLAIN (ANALYZE", "EXPLAIN (FORMAT JSON) "
                    "SELECT 1", "EXPLAIN (bogus) SELECT 1", "EXPLAIN (ANALYZE maybe) x"):
            with pytest.raises(psycopg.Error) as e:
                c.execute(bad)
            assert e.value.sqlstate == "42601", bad
        # the session goes on; EXPLAIN without ANALYZE still plans a bare stream query
        assert c.execute(f"EXPLAIN SELECT a FROM {stream}").fetchone()[0].startswith(
            "continuous query")


def test_names_as_postgresql_reads_them_and_a_query_that_ended(server):
    """Quoted, keyword and non-ASCII cursor names, a schema-qualified window, TIMING OFF; a
    value where a name should be is a syntax error; a cursor whose query ended (its LIMIT
    reached) runs nothing (34000)."""
    stream = unique("ea_n")
    with psycopg.connect(server.dsn, autocommit=True) as c, psycopg.connect(server.dsn) as r:
        c.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        c.execute("CREATE SCHEMA IF NOT EXISTS ea_schema")
        c.execute(f"CREATE WINDOW ea_schema.{stream}_w AS SELECT a FROM {stream} [RANGE "
                  "'1 minute'] WHERE a > 1")
        r.execute(f'DECLARE "Mixed Case" CURSOR FOR SELECT a FROM {stream}')
        r.execute(f"DECLARE next CURSOR FOR SELECT a FROM {stream} WHERE a > 2")
        r.execute(f"DECLARE few CURSOR FOR SELECT a FROM {stream} LIMIT 2")
        _insert(c, stream, [1, 2, 3, 4], 0)
        assert _operators(_explain(r, '"Mixed Case"'))[-1]["rows_in"] == 4
        with pytest.raises(psycopg.Error) as e:
            r.execute("EXPLAIN ANALYZE mixed_case")          # unquoted: another name
        assert e.value.sqlstate == "34000"
        r.rollback()
        r.execute(f'DECLARE "Mixed Case" CURSOR FOR SELECT a FROM {stream}')
        r.execute(f"DECLARE next CURSOR FOR SELECT a FROM {stream} WHERE a > 2")
        r.execute(f"DECLARE café CURSOR FOR SELECT a FROM {stream} WHERE a > 5")
        _insert(c, stream, [5, 6], 4)
        assert _operators(_explain(r, "next"))[0]["rows"] == 2
        assert _operators(_explain(r, "café"))[0]["rows"] == 1
        for value in ("'next'", "$$next$$", "1", "next.a.b"):
            with pytest.raises(psycopg.Error) as e:
                r.execute(f"EXPLAIN ANALYZE {value}")
            assert e.value.sqlstate == "42601", value
            r.rollback()
            r.execute(f"DECLARE next CURSOR FOR SELECT a FROM {stream} WHERE a > 2")
        lines = _explain(c, f"ea_schema.{stream}_w")
        assert _footer(lines, "Query") == f"window {stream}_w, backend"
        plain = [row[0] for row in c.execute(
            f"EXPLAIN (ANALYZE, TIMING OFF) ea_schema.{stream}_w").fetchall()]
        assert not [ln for ln in plain if "time=" in ln or ln.startswith("Running for")]
        assert _operators(plain)[0]["rows"] == 5 and _operators(plain)[0]["ms"] is None
        r.execute(f"DECLARE few CURSOR FOR SELECT a FROM {stream} LIMIT 2")
        _insert(c, stream, [7, 8, 9], 6)
        assert len(r.execute("FETCH ALL FROM few WITH (timeout = '5s')").fetchall()) == 2
        with pytest.raises(psycopg.Error) as e:
            r.execute("EXPLAIN ANALYZE few")                 # its LIMIT ended it
        assert e.value.sqlstate == "34000"
        r.rollback()
        # the shared server's schema list stays as other tests expect it
        c.execute(f"DROP WINDOW ea_schema.{stream}_w")
        c.execute("DROP SCHEMA ea_schema")
