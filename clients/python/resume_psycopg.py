"""Exactly once across a dropped connection, with psycopg 3: read a continuous query WITH
(progress = true), make the work durable at each progress row (here: a JSON file holding the
running total and the progress instant), and after the connection drops declare the cursor
again WITH (resume_from = that instant). Rows read after the last progress row are work not
yet made durable: they come again, and are counted once.

    python clients/python/resume_psycopg.py "host=127.0.0.1 port=55433 user=cq" state.json
"""
import datetime as dt
import json
import os
import sys
import tempfile

import psycopg

dsn = sys.argv[1] if len(sys.argv) > 1 else "host=127.0.0.1 port=55433 user=cq"
state_file = sys.argv[2] if len(sys.argv) > 2 else os.path.join(tempfile.mkdtemp(), "usage.json")
QUERY = "SELECT node, kw, valid_from FROM usage [RANGE '1 minute'] WHERE kw > 1"
T0 = dt.datetime(2026, 10, 1, 8, 0)


def load() -> dict:
    if os.path.exists(state_file):
        with open(state_file) as f:
            return json.load(f)
    return {"total": 0.0, "progress": None}


def save(state: dict) -> None:
    """Durable before the progress instant is: write aside, then rename over."""
    with open(state_file + ".new", "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(state_file + ".new", state_file)


def declare(conn) -> None:
    """The cursor, from where the last durable progress row says (from now, the first time)."""
    state = load()
    resume = "" if state["progress"] is None else f", resume_from = '{state['progress']}'"
    conn.execute(f"DECLARE u CURSOR FOR {QUERY} WITH (progress = true{resume})")


def follow(conn, until: dt.datetime) -> None:
    """Read until the progress instant reaches ``until``; commit at each progress row."""
    state = load()
    pending = 0.0
    while state["progress"] is None or state["progress"] < until.isoformat(sep=" "):
        for progress, node, kw, start in conn.execute(
                "FETCH ALL FROM u WITH (timeout = '5s')").fetchall():
            if progress is None:                       # a data row: work not yet durable
                pending += kw
                print(f"{start:%H:%M:%S} node {node}: {kw}")
            else:                                      # everything before it has come
                state = {"total": state["total"] + pending,
                         "progress": progress.isoformat(sep=" ")}
                save(state)
                pending = 0.0


def insert(conn, rows: list, upto: int) -> None:
    for node, kw, s in rows:
        conn.execute("INSERT INTO usage VALUES (%s, %s, %s)",
                     (node, kw, T0 + dt.timedelta(seconds=s)))
    at = T0 + dt.timedelta(seconds=upto)           # (a statement of cqgate's: no parameters)
    conn.execute(f"ALTER STREAM usage ADVANCE TO '{at:%Y-%m-%d %H:%M:%S}'")


with psycopg.connect(dsn, autocommit=True) as admin:
    admin.execute("DROP STREAM IF EXISTS usage CASCADE")
    admin.execute("CREATE STREAM usage (node INT, kw DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN) "
                  "TYPE ARCHIVED")
    if os.path.exists(state_file):
        os.remove(state_file)
    reader = psycopg.connect(dsn)               # (not autocommit: a cursor lives in a transaction)
    declare(reader)
    insert(admin, [(1, 2.5, 1), (2, 0.5, 2), (1, 3.0, 3)], 4)
    follow(reader, T0 + dt.timedelta(seconds=4))
    os.close(reader.pgconn.socket)              # the connection drops under the client
    print("-- dropped; resuming from", load()["progress"])
    insert(admin, [(2, 4.0, 5), (1, 1.5, 6)], 7)
    with psycopg.connect(dsn) as again:
        declare(again)
        follow(again, T0 + dt.timedelta(seconds=7))
    print("total:", load()["total"])
