"""Bad input ends only the connection that sent it: garbage before startup, lying lengths,
unknown message types, oversized messages, random and mutated byte streams (hypothesis).
SQL errors carry SQLSTATE and position and never end the session."""
import socket
import struct

import pgwire
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st


def _startup() -> bytes:
    body = struct.pack("!i", 196608) + b"user\0cq\0database\0cq\0\0"
    return struct.pack("!i", len(body) + 4) + body


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(0.3)
        try:
            s.sendall(data)
        except OSError:
            return b""
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, OSError):
            pass
        return out


def _healthy(server) -> None:
    with psycopg.connect(server.dsn, connect_timeout=10) as c:
        assert c.execute("SELECT 41 + 1").fetchone() == (42,)


def test_garbage_before_startup(server):
    _exchange(server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    _healthy(server)


def test_unknown_message_type(server):
    out = _exchange(server.port, _startup() + b"\x01\x00\x00\x00\x04")
    assert b"08P01" in out and b"invalid frontend message type" in out
    _healthy(server)


def test_length_that_lies(server):
    out = _exchange(server.port, _startup() + b"Q\x00\x00\x00\x02")
    assert b"08P01" in out
    _healthy(server)


def test_message_over_limit(server):
    out = _exchange(server.port, _startup() + b"Q" + struct.pack("!i", 0x7FFFFFF0))
    assert b"54000" in out
    _healthy(server)


def test_configured_message_limit(start_server):
    s = start_server(env={"CQGATE_MAX_MESSAGE_BYTES": "1000"})
    sql = b"SELECT '" + b"x" * 2000 + b"'\0"
    out = _exchange(s.port, _startup() + b"Q" + struct.pack("!i", len(sql) + 4) + sql)
    assert b"54000" in out and b"exceeds the limit of 1000 bytes" in out
    _healthy(s)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=300),
                 st.builds(lambda tail: _startup() + tail, st.binary(max_size=300))))
def test_random_bytes_never_kill_the_server(server, data):
    _exchange(server.port, data)
    assert server.alive()


_VALID = (_startup() + pgwire.parse("s", "SELECT $1::int + 1") + pgwire.bind("", "s", [b"41"])
          + pgwire.msg(b"D", b"P\0") + pgwire.execute("", 0) + pgwire.sync()
          + pgwire.query("SELECT 'x'; BEGIN; SELECT 1/0; ROLLBACK"))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(_VALID) - 1), st.integers(0, 255)),
                min_size=1, max_size=8),
       st.integers(0, len(_VALID)))
def test_mutated_sessions_never_kill_the_server(server, flips, cut):
    data = bytearray(_VALID)
    for pos, value in flips:
        data[pos] = value
    _exchange(server.port, bytes(data[:max(cut, 1)]))
    assert server.alive()


def test_valid_session_bytes_work(server):
    out = _exchange(server.port, _VALID)
    assert b"D\x00\x00\x00\x0c\x00\x01\x00\x00\x00\x0242" in out    # the row 42
    # ReadyForQuery after startup, after Sync, and after the query string; the error skips
    # the rest of the string (ROLLBACK), so the block is left failed: status E
    assert b"22012" in out and out.count(b"Z\x00\x00\x00\x05") == 3
    assert out.endswith(b"Z\x00\x00\x00\x05E")


def test_sql_errors_have_sqlstate_and_position(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        cases = [("SELECT * FROM missing_table", "42P01", 15),
                 ("SELECT nocolumn FROM pg_catalog.pg_type", "42703", 8),
                 ("SELECT 1 +* FROM", "42601", None)]
        for sql, state, pos in cases:
            with pytest.raises(psycopg.Error) as e:
                c.execute(sql)
            assert e.value.sqlstate == state, (sql, e.value.sqlstate, str(e.value))
            if pos is not None:
                assert e.value.diag.statement_position == str(pos)
        assert c.execute("SELECT 'still here'").fetchone() == ("still here",)


def test_a_value_that_is_not_utf8_in_duckdbs_message_is_a_user_error(server):
    """A bytea parameter cast to uuid: DuckDB's error quotes its bytes, which are not UTF-8,
    and its Python binding cannot decode its own message. Found by the protocol fuzzer."""
    with psycopg.connect(server.dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT %b::uuid", [b"\x80"])
        assert e.value.sqlstate == "22021"
        assert c.execute("SELECT 'still here'").fetchone() == ("still here",)


# malformed window clauses: each a 42601 (syntax) or 22023 (a value) pointing into the
# statement, never an internal error; the text before it shifts every position
MALFORMED_WINDOWS = [
    "[RANGE]", "[ROWS]", "[]", "[RANGE SLIDE '1 s']", "[RANGE 5 SLIDE]", "[SLIDE 2]",
    "[PARTITION BY k ROWS]", "[PARTITION BY ROWS 1]", "[PARTITION BY k ROWS 1 WHERE]",
    "[BETWEEN 1 AND]", "[BETWEEN AND 2]", "[RANGE 5 SLIDE 1 START AT]", "[NOW 5]",
    "[RANGE 'x']", "[RANGE -5]", "[RANGE 0]", "[ROWS 0]", "[ROWS -1]", "[ROWS 'a']",
    "[RANGE 5 SLIDE 0]", "[RANGE '5 parsecs']", "[BETWEEN 'x' AND 'y']",
    "[BETWEEN '2026-01-02' AND '2026-01-01']",
]


@pytest.mark.parametrize("window", MALFORMED_WINDOWS)
def test_malformed_windows_are_user_errors_with_a_position(server, window):
    lead = "SELECT 1;  "
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("CREATE STREAM IF NOT EXISTS mw (k INT, v INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        sql = f"{lead}SELECT k FROM mw {window}"
        with pytest.raises(psycopg.Error) as e:
            c.execute(sql)
        assert e.value.sqlstate in ("42601", "22023"), (window, e.value.sqlstate, str(e.value))
        pos = e.value.diag.statement_position
        assert pos is not None, (window, str(e.value))
        # it points into the window clause (or just past it, at its end)
        start = sql.index("[") + 1
        assert start <= int(pos) <= len(sql) + 1, (window, pos, str(e.value))
        assert c.execute("SELECT 'still here'").fetchone() == ("still here",)


def test_error_in_transaction_block(server):
    with psycopg.connect(server.dsn) as c:
        c.execute("SELECT 1")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT * FROM nowhere")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            c.execute("SELECT 1")
        c.rollback()
        assert c.execute("SELECT 2").fetchone() == (2,)
