"""The clearinghouse through the real server: sources on the ingest port (csvwrapper with
its options, jsonwrapper, user wrappers, arrowwrapper), ``cqgate push``, slack policies
replayed on shuffled streams with a known delay distribution, heartbeats, malformed input and
its views, back pressure and ON OVERLOAD load shedding, and ALTER STREAM ADD COLUMN while data
flows."""
from __future__ import annotations

import datetime as dt
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import psycopg
import pyarrow as pa
import pytest

from continuous import fetch as _fetch, follow as _follow, make_stream as _stream
from conftest import ServerProcess, psql
from continuous import at, lit, send_source as _source, unique, units


# ---------------------------------------------------------------------- slack and heartbeats
def _arrivals(admin, s: str, times) -> None:
    for t in times:                                  # one tuple per INSERT: arrival order
        admin.execute(f"INSERT INTO {s} VALUES ({int(t * 10)}, {int(t * 10)}, {lit(t)})")


def test_fixed_k_slack_reorders_and_counts_the_too_late(server):
    with _follow(server, "ks",
                 "CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                 "WITH (slack = '3 seconds')") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT v FROM {s}")
        # t_curr reaches 9, so everything up to 6 is released; 2 then comes too late
        _arrivals(admin, s, [1, 3, 2, 5, 4, 9, 6, 2])
        assert [r[0] for r in _fetch(cur, "FETCH 6 FROM c")] == [10, 20, 30, 40, 50, 60]
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []
        assert admin.execute("SELECT late FROM cq_streams WHERE stream = %s",
                             [s]).fetchone() == (1,)
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(10)}")      # releases 9
        assert [r[0] for r in _fetch(cur, "FETCH 1 FROM c")] == [90]


@pytest.mark.parametrize("precision", ["TIMESTAMP(0)", "TIMESTAMP(3)", "TIMESTAMP(9)",
                                       "TIMESTAMPTZ"])
def test_advance_to_releases_tuples_whatever_the_event_time_type(server, precision):
    """ADVANCE TO casts its timestamp to the event-time column's own type, whichever
    precision it has (DuckDB's TIMESTAMP_S, _MS, _NS, or WITH TIME ZONE)."""
    with _follow(server, "adv",
                 f"CREATE STREAM {{s}} (k INT, v INT, t {precision} TIMESTAMPCOLUMN) "
                 "WITH (slack = '3 seconds')") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT v FROM {s}")
        _arrivals(admin, s, [1, 2])                  # held by the slack
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(10)}")
        assert [r[0] for r in _fetch(cur, "FETCH 2 FROM c")] == [10, 20]


def test_mp_k_slack_grows_to_the_largest_delay(server):
    with _follow(server, "mpk",
                 "CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                 "WITH (slack = 'adaptive')") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT v FROM {s}")
        # K starts at 0: 1, 2, 5 go at once, and 3 (2 behind 5) is late but makes K = 2;
        # then 6 waits until 9 has come, 7 goes at once (9 - K), 8 waits
        _arrivals(admin, s, [1, 2, 5, 3, 6, 9, 7, 8])
        assert [r[0] for r in _fetch(cur, "FETCH 5 FROM c")] == [10, 20, 50, 60, 70]
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []
        assert admin.execute("SELECT late FROM cq_streams WHERE stream = %s",
                             [s]).fetchone() == (1,)
        admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(10)}")
        assert [r[0] for r in _fetch(cur, "FETCH 2 FROM c")] == [80, 90]


def test_heartbeats_keep_a_union_with_a_quiet_stream_moving(server):
    busy, quiet = unique("busy"), unique("quiet")
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        _stream(admin, busy)
        admin.execute(f"CREATE STREAM {quiet} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                 "WITH (heartbeat = '100ms')")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT v FROM {busy} [NOW] UNION ALL "
                    f"SELECT v FROM {quiet} [NOW]")
        # event times that follow the wall clock: a quiet stream's time moves on with it
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)

        def near(seconds):
            return f"TIMESTAMP '{(now + dt.timedelta(seconds=seconds)).isoformat(sep=' ')}'"
        admin.execute(f"INSERT INTO {quiet} VALUES (0, 1, {near(0)})")
        admin.execute(f"INSERT INTO {busy} VALUES (0, 2, {near(0.01)}), (0, 3, {near(0.02)})")
        # the quiet stream's heartbeat moves its time on, so the busy rows are released
        # (the timeout is generous, for a busy machine: without heartbeats none would come)
        rows = _fetch(cur, "FETCH 3 FROM c WITH (timeout = '60s')")
        assert [r[0] for r in rows] == [1, 2, 3]


# ---------------------------------------------------------------------- the ingest port
def test_csv_source_on_the_ingest_port(server):
    with _follow(server, "src") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v, t FROM {s}")
        assert _source(server.ingest_port, f"csvwrapper,{s}\n"
                               "1,10,2026-11-01 00:00:01\n"
                               "2,20,2026-11-01 00:00:02,extra,columns\n"
                               "3,oops,2026-11-01 00:00:03\n"            # bad: skipped
                               "4\n"                                      # padded, stamped
                               "#punctuate 2030-01-01 00:00:00\n") == b""
        rows = _fetch(cur, "FETCH 3 FROM c")
        assert [r[:2] for r in rows] == [(1, 10), (2, 20), (4, None)]
        assert rows[0][2] == 1 and rows[2][2] > 20 * 86400      # 4 was stamped on arrival
        st = admin.execute("SELECT tuples FROM cq_streams WHERE stream = %s", [s]).fetchone()
        assert st == (3,)


@pytest.mark.parametrize("ragged", [False, True])
def test_only_an_empty_field_is_null(server, ragged):
    """Words Arrow would read as NULL by default stay text; a ragged line sends the whole
    chunk line by line, which must read the same."""
    with _follow(server, "nul", "CREATE STREAM {s} (k INT, w TEXT, x DOUBLE, "
                                "t TIMESTAMP TIMESTAMPCOLUMN)") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, w, x FROM {s}")
        lines = ["1,NA,NaN,2026-11-01 00:00:01", "2,null,1.5,2026-11-01 00:00:02",
                 "3,,,2026-11-01 00:00:03", "4,N/A,-1,2026-11-01 00:00:04"]
        if ragged:
            lines.append("5,NULL,2,2026-11-01 00:00:05,extra")
        assert _source(server.ingest_port, f"csvwrapper,{s}\n" + "\n".join(lines) + "\n") \
            == b""
        rows = _fetch(cur, f"FETCH {len(lines)} FROM c")
    assert [r[:2] for r in rows] == [(1, "NA"), (2, "null"), (3, None), (4, "N/A")] + \
        ([(5, "NULL")] if ragged else [])
    assert rows[0][2] != rows[0][2] and rows[2][2] is None      # NaN is a number, empty NULL


def test_json_source_and_unknown_names(server):
    with _follow(server, "js") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        assert _source(server.ingest_port, f"jsonwrapper,{s}\n"
                               '{"k": 5, "v": 50, "t": "2026-11-01 00:00:05"}\n'
                               "not json\n"
                               '{"K": 6, "V": 60, "T": "2026-11-01 00:00:06"}\n') == b""
        assert _fetch(cur, "FETCH 2 FROM c") == [(5, 50), (6, 60)]
    assert _source(server.ingest_port, "nosuchwrapper,x\n1\n").startswith(b"ERROR: unknown wrapper")
    assert _source(server.ingest_port, "csvwrapper,nosuchstream\n1\n").startswith(
        b'ERROR: stream "nosuchstream" does not exist')


def _ipc(*tables) -> bytes:
    """Tables as one Arrow IPC stream, each its own record batches of up to 3 rows."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tables[0].schema) as writer:
        for t in tables:
            for batch in t.to_batches(max_chunksize=3):
                writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_an_arrow_source_gives_the_rows_a_csv_source_gives(server):
    rng = random.Random(7)
    ks = [rng.choice([None, -5, 0, 1, 2**31 - 1]) for _ in range(40)]
    names = [rng.choice([None, "a", "b c", "é"]) for _ in range(40)]
    csv_text = "".join(f"{'' if k is None else k},{n or ''},2026-11-01 00:00:{i:02d}\n"
                       for i, (k, n) in enumerate(zip(ks, names)))
    # by name in any case and order, int64 into INT, a zoned time read as UTC
    table = pa.table({"NAME": pa.array([n or None for n in names]),
                      "t": pa.array([at(i) for i in range(40)], pa.timestamp("us", "UTC")),
                      "k": pa.array(ks, pa.int64())})
    got, create = {}, "CREATE STREAM {s} (k INT, name TEXT, t TIMESTAMP TIMESTAMPCOLUMN)"
    with _follow(server, "acsv", create) as (s1, admin, cur1), \
            _follow(server, "aarw", create) as (s2, _, cur2):
        for s, cur in ((s1, cur1), (s2, cur2)):
            cur.execute(f"DECLARE c{s} CURSOR FOR SELECT k, name, t FROM {s}")
        assert _source(server.ingest_port, f"csvwrapper,{s1}\n{csv_text}") == b""
        data = _ipc(table.slice(0, 20), table.slice(20))
        assert _source(server.ingest_port, f"arrowwrapper,{s2}\n".encode() + data) == b""
        for s, cur in ((s1, cur1), (s2, cur2)):
            admin.execute(f"ALTER STREAM {s} ADVANCE TO {lit(60)}")
            got[s] = _fetch(cur, f"FETCH 40 FROM c{s}")
    assert got[s2] == got[s1] == [(k, n, i) for i, (k, n) in enumerate(zip(ks, names))]


def test_an_arrow_source_skips_a_batch_that_does_not_fit_and_refuses_what_is_not_arrow(
        server):
    with _follow(server, "abad") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        good = pa.table({"k": ["1", "2"], "v": [10, 20], "t": [at(1), at(2)]})
        bad = pa.table({"k": ["3", "x"], "v": [30, 40], "t": [at(3), at(4)]})
        later = pa.table({"k": ["5"], "v": [50], "t": [at(5)]})
        assert _source(server.ingest_port,
                       f"arrowwrapper,{s}\n".encode() + _ipc(good, bad, later)) == b""
        assert _fetch(cur, "FETCH 3 FROM c") == [(1, 10), (2, 20), (5, 50)]
        reason = admin.execute("SELECT line, reason FROM cq_ingest_errors WHERE stream = %s",
                               [s]).fetchall()
        assert len(reason) == 1 and reason[0][0] == 2 and 'column "k"' in reason[0][1], reason
        head = f"arrowwrapper,{s}\n".encode()
        other = pa.table({"k": [1], "nosuch": [1]})
        # a string column whose last offset points far past its bytes: read unchecked, it
        # would have the server read memory it does not own
        valid = _ipc(pa.table({"k": ["ab", "cd"]}))
        where = valid.rfind(struct.pack("<iii", 0, 2, 4))
        forged = valid[:where] + struct.pack("<iii", 0, 2, 1 << 20) + valid[where + 12:]
        for sent, error in [
                (head + forged, "batch 1 is malformed"),
                (head + _ipc(other), f'column "nosuch" of the Arrow stream is not a column '
                                     f'of stream "{s}"'),
                (head + b"1,2,2026-11-01 00:00:09\n", "the Arrow stream ends inside a message"),
                (head + _ipc(good)[:-30], "the Arrow stream ends inside a message")]:
            answer = _source(server.ingest_port, sent).decode()
            assert answer.startswith("ERROR: " + error), answer
        # what came before a refusal's batch is kept; the stream goes on
        admin.execute(f"INSERT INTO {s} VALUES (6, 60, {lit(6)})")
        assert _fetch(cur, "FETCH 1 FROM c") == [(6, 60)]


def test_the_arrow_source_in_the_docs_runs(server):
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    text = open(os.path.join(docs, "ingest.md"), encoding="utf-8").read()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    with _follow(server, "meter", "CREATE STREAM {s} (house INT, kwh DOUBLE, "
                 "t TIMESTAMP TIMESTAMPCOLUMN)") as (s, admin, cur):
        cur.execute(f"DECLARE m CURSOR FOR SELECT house, kwh, valid_from FROM {s}")
        exec(code.replace("arrowwrapper,meter", f"arrowwrapper,{s}")
             .replace("55533", str(server.ingest_port)), {})
        at_10 = units(dt.datetime(2026, 11, 1, 10, 0, 0))
        assert _fetch(cur, "FETCH 2 FROM m") == [(3, 1.5, at_10 + 12), (4, 0.25, at_10 + 13)]


def test_cqgate_push_sends_an_arrow_stream_file(server, tmp_path):
    with _follow(server, "pusha") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        f = tmp_path / "data.arrows"
        f.write_bytes(_ipc(pa.table({"k": [1, 2, 3], "v": [10, 20, 30],
                                     "t": [at(1), at(2), at(3)]})))
        push = [sys.executable, "-m", "gateway", "push", s, str(f), "--wrapper",
                "arrowwrapper", "--quiet", "--port", str(server.ingest_port)]
        r = subprocess.run(push, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert _fetch(cur, "FETCH 3 FROM c") == [(1, 10), (2, 20), (3, 30)]
        r = subprocess.run(push + ["--rate", "10"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--rate and --speed pace lines" in r.stderr


def test_cqgate_push(server, tmp_path):
    with _follow(server, "push") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k FROM {s}")
        f = tmp_path / "data.csv"
        f.write_text("".join(f"{i},{i},2026-11-01 00:00:{i:02d}\n" for i in range(1, 4)))
        r = subprocess.run([sys.executable, "-m", "gateway", "push", s, str(f), "--port",
                            str(server.ingest_port)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert _fetch(cur, "FETCH 3 FROM c") == [(1,), (2,), (3,)]
        r = subprocess.run([sys.executable, "-m", "gateway", "push", "nosuch", str(f),
                            "--port", str(server.ingest_port)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and 'stream "nosuch" does not exist' in r.stderr


def test_csv_options_delimiter_quote_and_field_order(server):
    with _follow(server, "opt",
                 "CREATE STREAM {s} (k INT, name TEXT, t TIMESTAMP TIMESTAMPCOLUMN) "
                 "WITH (delimiter = ';', quote = '''', columns = 't,name,k')") \
            as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, name, t FROM {s}")
        assert _source(server.ingest_port, f"csvwrapper,{s}\n"
                                           "2026-11-01 00:00:01;'a;b';1\n"
                                           "2026-11-01 00:00:02;plain;2\n") == b""
        assert _fetch(cur, "FETCH 2 FROM c") == [(1, "a;b", 1), (2, "plain", 2)]
        # the line rules, with the same options: extra fields dropped, missing ones NULL
        assert _source(server.ingest_port, f"csvwrapper,{s}\n"
                                           "2026-11-01 00:00:03;'x';3;extra\n"
                                           "2026-11-01 00:00:04\n") == b""
        assert _fetch(cur, "FETCH 2 FROM c") == [(3, "x", 3), (None, None, 4)]
        with pytest.raises(psycopg.errors.UndefinedColumn, match="nope"):
            admin.execute(f"ALTER STREAM {s} SET (columns = 't,nope')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="delimiter"):
            admin.execute(f"ALTER STREAM {s} SET (delimiter = ';;')")


# ---------------------------------------------------------------------- bad input
def test_malformed_lines_are_reported_with_line_number_and_reason(server):
    with _follow(server, "bad") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        assert _source(server.ingest_port, f"csvwrapper,{s}\n"
                                           "1,10,2026-11-01 00:00:01\n"     # line 2
                                           "x,20,2026-11-01 00:00:02\n"     # a wrong type
                                           "3,30,2026-13-45 00:00:03\n"     # a bad timestamp
                                           '4,"40,2026-11-01 00:00:04\n'    # broken quoting
                                           "5,50,2026-11-01 00:00:05\n") == b""
        assert _source(server.ingest_port, f"jsonwrapper,{s}\n"
                                           '{"k": 6, "v": 60, "t": "2026-11-01 00:00:06"}\n'
                                           '{"k": 7,\n'                     # line 3: not JSON
                                           "[8]\n") == b""                  # not an object
        assert _fetch(cur, "FETCH 3 FROM c") == [(1, 10), (5, 50), (6, 60)]
        errors = admin.execute("SELECT line, reason, text FROM cq_ingest_errors "
                               "WHERE stream = %s", [s]).fetchall()
        assert sorted((n, reason.split(":")[0].split(" (")[0], text)
                      for n, reason, text in errors) == [
            (3, 'invalid input for column "k"', "x,20,2026-11-01 00:00:02"),
            (3, "not JSON", '{"k": 7,'),
            (4, 'invalid input for column "t"', "3,30,2026-13-45 00:00:03"),
            (4, "not a JSON object", "[8]"),
            (5, "broken quoting", '4,"40,2026-11-01 00:00:04')]
        assert admin.execute("SELECT tuples, errors FROM cq_streams WHERE stream = %s",
                             [s]).fetchone() == (3, 5)


# ---------------------------------------------------------------------- user wrappers
WRAPPER = '''
def init(columns):
    return {"columns": columns, "lines": 0}


def next(state, line):
    """key=value pairs separated by spaces; anything else raises (a bad line)."""
    state["lines"] += 1
    return dict(pair.split("=", 1) for pair in line.split())


def done(state):
    return [-1, state["lines"], "2026-11-01 00:01:00"]
'''


@pytest.mark.parametrize("module", ["os", "json", "continuous"])
def test_a_wrapper_names_only_modules_in_the_wrapper_folders(server, module):
    """CREATE WRAPPER is SQL anyone may send: a function of the standard library, or of a
    module on the server's Python path, must not be reachable through it."""
    with _follow(server, "evil") as (s, admin, cur):
        w = unique("evil")
        admin.execute(f"CREATE WRAPPER {w} (init = '{module}.getcwd', next = '{module}.rename', "
                      f"done = '{module}.getcwd')")
        admin.execute(f"ALTER STREAM {s} ADD WRAPPER {w}")
        answer = _source(server.ingest_port, f"{w},{s}\nx\n").decode()
        assert answer.startswith(f'ERROR: wrapper "{w}" cannot be loaded: module '), answer
        assert "wrapper folders" in answer and "--wrapper-path" in answer


def test_user_wrapper_attached_with_alter_stream(server):
    module = unique("kvwrap")
    folder = os.path.join(server.data_dir, "wrappers")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, module + ".py"), "w") as f:
        f.write(WRAPPER)
    with _follow(server, "uw") as (s, admin, cur):
        w = unique("kv")
        admin.execute(f"CREATE WRAPPER {w} (init = '{module}.init', next = '{module}.next', "
                      f"done = '{module}.done')")
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        lines = (f"{w},{s}\nk=1 v=10 t=2026-11-01T00:00:01\ngarbage\n"
                 "v=20 k=2 t=2026-11-01T00:00:02\n")
        assert _source(server.ingest_port, lines) == \
            f'ERROR: wrapper "{w}" is not attached to stream "{s}" (ALTER STREAM {s} ADD ' \
            f'WRAPPER {w})\n'.encode()
        admin.execute(f"ALTER STREAM {s} ADD WRAPPER {w}")
        assert _source(server.ingest_port, lines) == b""
        # two rows from next (garbage is a bad line), one from done: it saw three lines
        assert _fetch(cur, "FETCH 3 FROM c") == [(1, 10), (2, 20), (-1, 3)]
        reason = admin.execute("SELECT reason FROM cq_ingest_errors WHERE stream = %s",
                               [s]).fetchone()[0]
        assert reason.startswith("wrapper raised ValueError")
        with pytest.raises(psycopg.errors.UndefinedObject, match="does not exist"):
            admin.execute(f"ALTER STREAM {s} ADD WRAPPER nosuchwrapper")


# ---------------------------------------------------------------------- slack on shuffled data
def _shuffled(n: int, seed: int) -> list:
    """Event times 0, 0.1, 0.2 … s, in the order they arrive when each tuple is delayed by
    one of 0, 0, 0, 0.3, 0.8 or 2.5 seconds (chosen at random, reproducibly)."""
    rng = random.Random(seed)
    times = [round(i * 0.1, 1) for i in range(n)]
    delay = [rng.choice([0, 0, 0, 0.3, 0.8, 2.5]) for _ in range(n)]
    return sorted(times, key=lambda t: (t + delay[round(t * 10)], t))


def _k_slack(order: list, k: float, adaptive: bool) -> tuple[list, float]:
    """Seed 003's slack, one tuple at a time: the late tuples, and K at the end (counted in
    tenths of a second, so no rounding blurs an edge)."""
    watermark, current, late, k = -10**9, -10**9, [], round(k * 10)
    for t in (round(t * 10) for t in order):
        if t < watermark:
            late.append(t / 10)
        current = max(current, t)
        if adaptive:
            k = max(k, current - t)          # D(x) = t_curr − x.ts, late tuples' too
        watermark = max(watermark, current - k)
    return late, k / 10


def _send_lines(port: int, head: str, lines: list, per: int = 40) -> None:
    """One source sending its lines a few at a time, so they reach the server in several
    reads."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        for i in range(0, len(lines), per):
            sock.sendall("".join(lines[i:i + per]).encode())
            time.sleep(0.005)        # spacing, not a wait: where reads split must not matter
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(4096) == b""


@pytest.mark.parametrize("slack, k, adaptive", [("1 second", 1.0, False),
                                                ("3 seconds", 3.0, False),
                                                ("adaptive", 0.0, True)])
def test_slack_on_a_shuffled_stream(server, slack, k, adaptive):
    order = _shuffled(300, seed=5)
    late, final_k = _k_slack(order, k, adaptive)
    if slack == "3 seconds":
        assert late == []            # K above the largest delay: nothing is late
    else:
        assert len(late) > 5         # the delays do outrun this slack
    with _follow(server, "shuf",
                 "CREATE STREAM {s} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                 f"WITH (slack = '{slack}')") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT v, t FROM {s}")
        lines = [f"0,{round(t * 10)},{at(t).isoformat(sep=' ')}\n" for t in order]
        _send_lines(server.ingest_port, f"csvwrapper,{s}\n", lines + ["#punctuate 2030-01-01\n"])
        want = sorted(set(order) - set(late))
        rows = _fetch(cur, f"FETCH {len(want)} FROM c")
        assert [t for _, t in rows] == want                    # in order, none lost
        assert _fetch(cur, "FETCH ALL FROM c WITH (timeout = '200ms')") == []
        got = admin.execute("SELECT late, extract(epoch FROM slack) FROM cq_streams "
                            "WHERE stream = %s", [s]).fetchone()
        assert got == (len(late), pytest.approx(final_k))
        logged = admin.execute("SELECT event_time FROM cq_late_tuples WHERE stream = %s "
                               "ORDER BY arrived, event_time", [s]).fetchall()
        assert sorted(units(r[0]) for r in logged) == sorted(late)


# ---------------------------------------------------------------------- heartbeats
def test_a_query_over_a_busy_and_a_silent_stream_keeps_producing(server):
    """The busy stream's rows all come out, each once, although the other stream said nothing
    after its first tuple (event times are arrival times here): its heartbeats move its time
    on. How soon (a few heartbeat intervals) is a benchmark's measure, not this test's."""
    busy, quiet = unique("busy"), unique("quiet")
    n, beat = 30, 0.3
    with psycopg.connect(server.dsn, autocommit=True) as admin, \
            psycopg.connect(server.dsn) as conn:
        _stream(admin, busy)
        admin.execute(f"CREATE STREAM {quiet} (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN) "
                 f"WITH (heartbeat = '{int(beat * 1000)}ms')")
        cur = conn.cursor()
        cur.execute(f"DECLARE c CURSOR FOR SELECT v FROM {busy} [NOW] UNION ALL "
                    f"SELECT v FROM {quiet} [NOW]")
        assert _source(server.ingest_port, f"csvwrapper,{quiet}\n0,-1\n") == b""

        def feed():
            with socket.create_connection(("127.0.0.1", server.ingest_port), timeout=10) as sock:
                sock.sendall(f"csvwrapper,{busy}\n".encode())
                for i in range(n):
                    sock.sendall(f"0,{i}\n".encode())
                    # not a wait for anything: the tuples are stamped on arrival, so this
                    # spreads them over wall-clock time, through several heartbeats
                    time.sleep(0.05)
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        got = []
        deadline = time.monotonic() + 60          # generous, for a busy machine
        while len(got) < n:
            assert time.monotonic() < deadline, f"busy rows after 60 s: {got}"
            got += [v for (v,) in _fetch(cur, "FETCH ALL FROM c WITH (timeout = '2s')")
                    if v >= 0]
        feeder.join(60)
        assert not feeder.is_alive()
        assert sorted(got) == list(range(n))


# ---------------------------------------------------------------------- limits and overload
def _backend_pid(srv) -> int:
    out = subprocess.run(["pgrep", "-P", str(srv.proc.pid), "-f", "executor.backend"],
                         capture_output=True, text=True, timeout=10).stdout.split()
    assert len(out) == 1, out
    return int(out[0])


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


PAD = "x" * 100
BLOCK = "".join(f"{i},{i},{PAD}\n" for i in range(10_000)).encode()   # ~1 MiB, stamped


def _wait_counts(admin, stream: str, total: int, timeout: float = 90) -> tuple:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = admin.execute("SELECT tuples, dropped FROM cq_streams WHERE stream = %s",
                            [stream]).fetchone()
        if got and got[0] + got[1] >= total:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{stream}: {got} after {timeout}s, want {total} in all")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A server of its own (these tests stop its back end) with a short line limit."""
    srv = ServerProcess(str(tmp_path_factory.mktemp("cqgate-limited")), "--max-line-bytes",
                        "200")
    yield srv
    srv.stop()


def test_a_line_longer_than_the_limit_ends_the_source(limited):
    with psycopg.connect(limited.dsn, autocommit=True) as admin:
        s = unique("long")
        _stream(admin, s)
        answer = _source(limited.ingest_port, f"csvwrapper,{s}\n1,1,2026-11-01 00:00:01\n"
                                              f"2,2,{'9' * 300}\n3,3,2026-11-01 00:00:03\n")
        assert answer == b"ERROR: a line is longer than the limit (200 bytes)\n"
        assert _wait_counts(admin, s, 1) == (1, 0)      # the line before it arrived


def test_a_stalled_back_end_pushes_back_on_the_source(limited):
    s = unique("bp")
    with psycopg.connect(limited.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, pad TEXT, "
                      "t TIMESTAMP TIMESTAMPCOLUMN)")
        backend = _backend_pid(limited)
        rss = _rss_mb(limited.proc.pid)
        sent = 0
        sock = socket.create_connection(("127.0.0.1", limited.ingest_port), timeout=10)
        try:
            sock.sendall(f"csvwrapper,{s}\n".encode())
            os.kill(backend, signal.SIGSTOP)
            try:
                # not a wait for anything: 3 s in which sending makes no progress at all (a
                # slow machine only stalls it sooner)
                sock.settimeout(3)
                with pytest.raises(TimeoutError):        # TCP pushes back: sending stalls
                    for _ in range(400):                 # 400 MiB, if nothing held it up
                        view = memoryview(BLOCK)
                        while view:
                            n = sock.send(view)
                            view, sent = view[n:], sent + n
                assert sent < 150 * len(BLOCK), sent     # stalled after some MiB of buffers
                grown = _rss_mb(limited.proc.pid) - rss
                assert grown < 300, f"the gateway grew by {grown:.0f} MiB"
            finally:
                os.kill(backend, signal.SIGCONT)
            sock.settimeout(60)
            if sent % len(BLOCK):
                sock.sendall(BLOCK[sent % len(BLOCK):])  # finish the block cut short
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100) == b""
        finally:
            sock.close()
        total = -(-sent // len(BLOCK)) * len(BLOCK.splitlines())
        assert _wait_counts(admin, s, total) == (total, 0)      # nothing lost


@pytest.mark.parametrize("policy", ["DROP", "KEEP COUNTS", "KEEP SAMPLE"])
def test_on_overload_sheds_load_and_counts_it(limited, policy):
    s = unique("shed")
    blocks = 40
    with psycopg.connect(limited.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE STREAM {s} (k INT, v INT, pad TEXT, t TIMESTAMP "
                      f"TIMESTAMPCOLUMN) WITH (sample = '0.25') ON OVERLOAD {policy}")
        backend = _backend_pid(limited)
        os.kill(backend, signal.SIGSTOP)
        try:
            # the source is never held up: what the back end cannot take is shed
            assert _source(limited.ingest_port, f"csvwrapper,{s}\n".encode() + BLOCK * blocks,
                           timeout=30) == b""
        finally:
            os.kill(backend, signal.SIGCONT)
        total = blocks * len(BLOCK.splitlines())
        tuples, dropped = _wait_counts(admin, s, total)
        assert tuples + dropped == total and dropped > 0
        shed = admin.execute("SELECT coalesce(sum(dropped), 0), coalesce(sum(kept), 0) "
                             "FROM cq_shed WHERE stream = %s", [s]).fetchone()
        if policy == "DROP":
            assert shed == (0, 0)                        # only the total is kept
        else:
            assert shed[0] == dropped
        if policy == "KEEP SAMPLE":
            assert abs(float(shed[1] / (shed[0] + shed[1])) - 0.25) < 0.01
        else:
            assert shed[1] == 0


# ---------------------------------------------------------------------- schema changes
def test_add_column_while_a_source_and_queries_run(server):
    with _follow(server, "addc") as (s, admin, cur), \
            psycopg.connect(server.dsn) as other:
        notices = []
        cur.connection.add_notice_handler(lambda d: notices.append(d.message_primary))
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        with socket.create_connection(("127.0.0.1", server.ingest_port), timeout=10) as sock:
            sock.sendall(f"csvwrapper,{s}\n1,10,2026-11-01 00:00:01\n".encode())
            assert _fetch(cur, "FETCH 1 FROM c") == [(1, 10)]
            admin.execute(f"ALTER STREAM {s} ADD COLUMN w INT")
            cur2 = other.cursor()
            cur2.execute(f"DECLARE d CURSOR FOR SELECT k, w FROM {s}")
            # the same source goes on: without the new field, then with it
            sock.sendall(b"2,20,2026-11-01 00:00:02\n3,30,2026-11-01 00:00:03,300\n")
            assert _fetch(cur, "FETCH 2 FROM c") == [(2, 20), (3, 30)]
            assert _fetch(cur2, "FETCH 2 FROM d") == [(2, None), (3, 300)]
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100) == b""
        assert any(f'stream "{s}" has a new column "w"' in n for n in notices), notices
        admin.execute(f"INSERT INTO {s} VALUES (4, 40, {lit(4)}, 400)")
        assert _fetch(cur2, "FETCH 1 FROM d") == [(4, 400)]


def test_a_query_that_fails_shows_why_in_cq_queries(server):
    with _follow(server, "fail", "CREATE STREAM {s} (name TEXT, t TIMESTAMP TIMESTAMPCOLUMN)") \
            as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT CAST(name AS INT) AS n FROM {s}")
        admin.execute(f"INSERT INTO {s} VALUES ('12', {lit(1)}), ('twelve', {lit(2)})")
        with pytest.raises(psycopg.Error, match="twelve"):
            cur.execute("FETCH 2 FROM c")
        state, error = admin.execute("SELECT state, error FROM cq_queries WHERE query LIKE "
                                     "%s", [f"%{s}%"]).fetchone()
        assert state == "failed" and "twelve" in error


# ---------------------------------------------------------------------- cqgate push pacing
def test_cqgate_push_rate_and_replay_speed(server, tmp_path):
    with _follow(server, "pace") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k FROM {s}")
        f = tmp_path / "paced.csv"
        # event times 0, 0.1 … 1.9 s: 2 s of data
        f.write_text("".join(f"{i},{i},{at(i / 10).isoformat(sep=' ')}\n" for i in range(20)))
        push = [sys.executable, "-m", "gateway", "push", s, str(f), "--port",
                str(server.ingest_port)]
        t0 = time.monotonic()
        r = subprocess.run(push + ["--speed", "4"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t0 >= 2 / 4 - 0.05          # 2 s of event time at 4×
        assert "20 lines" in r.stderr                            # the progress line
        assert _fetch(cur, "FETCH 20 FROM c") == [(i,) for i in range(20)]
        f.write_text("".join(f"{i},{i},{at(10 + i).isoformat(sep=' ')}\n" for i in range(20)))
        t0 = time.monotonic()
        r = subprocess.run(push + ["--rate", "50", "--quiet"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and r.stderr == ""
        assert time.monotonic() - t0 >= 19 / 50 - 0.05        # 20 lines at 50 a second
        assert _fetch(cur, "FETCH 20 FROM c") == [(i,) for i in range(20)]


def test_the_example_source_program(server):
    """clients/sources/source.py, as a user runs it: lines without an event time, stamped."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    s = unique("ex")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE STREAM {s} (house INT, kwh DOUBLE, t TIMESTAMP TIMESTAMPCOLUMN)")
        r = subprocess.run([sys.executable, os.path.join(root, "clients", "sources", "source.py"),
                            s, "--port", str(server.ingest_port), "--count", "3", "--every",
                            "0.01"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert _wait_counts(admin, s, 3) == (3, 0)


def test_psql_copy_into_a_stream_feeds_a_running_query(server, tmp_path):
    with _follow(server, "pcopy") as (s, admin, cur):
        cur.execute(f"DECLARE c CURSOR FOR SELECT k, v FROM {s}")
        src = tmp_path / "rows.csv"
        # COPY rows arrive one by one: 00:00:02 after 00:00:03 is late (slack none)
        src.write_text("1,10,2026-11-01 00:00:01\n3,30,2026-11-01 00:00:03\n"
                       "2,20,2026-11-01 00:00:02\n4,40,2026-11-01 00:00:04\n")
        r = psql(server, "-c", f"\\copy {s} from '{src}' csv")
        assert r.returncode == 0 and "COPY 4" in r.stdout, r.stderr
        assert "1 tuple(s) earlier than the watermark" in r.stderr
        assert _fetch(cur, "FETCH 3 FROM c") == [(1, 10), (3, 30), (4, 40)]
        late = admin.execute("SELECT source, tuple FROM cq_late_tuples WHERE stream = %s",
                             [s]).fetchall()
        assert len(late) == 1 and late[0][0].startswith("COPY (pid ")
        assert '"k": 2' in late[0][1]


def test_several_sources_feed_one_stream_at_once(server):
    s = unique("many")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        _stream(admin, s)
        lines = "".join(f"{i},{i}\n" for i in range(5000))      # stamped on arrival
        answers = []
        feeders = [threading.Thread(target=lambda: answers.append(
            _source(server.ingest_port, f"csvwrapper,public.{s}\n" + lines)))
            for _ in range(3)]
        for f in feeders:
            f.start()
        for f in feeders:
            f.join(60)
        assert answers == [b""] * 3
        assert _wait_counts(admin, s, 15000) == (15000, 0)
        assert admin.execute("SELECT late, errors FROM cq_streams WHERE stream = %s",
                             [s]).fetchone() == (0, 0)


def test_dropping_a_stream_ends_its_sources(server):
    s = unique("gone")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        _stream(admin, s)
        with socket.create_connection(("127.0.0.1", server.ingest_port), timeout=10) as sock:
            sock.sendall(f"csvwrapper,{s}\n1,1\n".encode())
            _wait_counts(admin, s, 1)
            admin.execute(f"DROP STREAM {s}")
            sock.sendall(b"2,2\n")
            assert sock.recv(200) == f'ERROR: stream "{s}" was dropped\n'.encode()
