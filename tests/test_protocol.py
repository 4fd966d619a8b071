"""Protocol behaviour seen message by message: extended-query error recovery (discard until
Sync, one ReadyForQuery per Sync), Flush without Sync, row-limited Execute and
PortalSuspended, portals surviving Sync inside a transaction, ParameterStatus after SET,
startup options, cancel, and data surviving a restart."""
import datetime as dt
import threading
import time

import psycopg
import pytest

from pgwire import Client, bind, error_fields, execute, flush, parse, query, sync


def tags(messages) -> list:
    return [t.decode() for t, _ in messages]


def test_gssenc_and_ssl_requests_answered_n(server):
    import socket
    import struct
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(struct.pack("!ii", 8, 80877104))      # GSSENCRequest
        assert sock.recv(1) == b"N"
        sock.sendall(struct.pack("!ii", 8, 80877103))      # SSLRequest, no certificate
        assert sock.recv(1) == b"N"


def test_cqgate_command_help():
    import subprocess
    r = subprocess.run(["cqgate", "serve", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    for flag in ("--host", "--port", "--ingest-port", "--data-dir", "CQGATE_PORT"):
        assert flag in r.stdout


def test_error_discards_until_sync(server):
    c = Client(server.port)
    try:
        c.send(parse("", "SELECT * FROM nowhere_at_all"), bind("", ""), execute(), sync(),
               sync())
        first = c.until(b"Z")
        # cqgate resolves names when the statement first runs, so the error may follow
        # ParseComplete/BindComplete; after it nothing but the ReadyForQuery of the Sync.
        assert tags(first)[-2:] == ["E", "Z"] and tags(first).count("E") == 1
        assert error_fields(first[-2][1])["C"] == "42P01"
        assert first[-1][1] == b"I"
        assert tags(c.until(b"Z")) == ["Z"]          # exactly one ReadyForQuery per Sync
        c.send(parse("", "SELECT 1"), bind("", ""), execute(), sync())
        assert tags(c.until(b"Z")) == ["1", "2", "D", "C", "Z"]
    finally:
        c.close()


def test_flush_without_sync_and_row_limit(server):
    c = Client(server.port)
    try:
        c.send(query("BEGIN"))
        c.until(b"Z")
        c.send(parse("s1", "SELECT g FROM generate_series(1, 5) g ORDER BY g"),
               bind("p1", "s1"), execute("p1", 2), flush())
        got = [c.read() for _ in range(5)]
        assert tags(got) == ["1", "2", "D", "D", "s"]       # answered without a Sync
        c.send(sync())
        assert c.until(b"Z")[-1][1] == b"T"
        c.send(execute("p1", 2), sync())                    # the portal survived the Sync
        assert tags(c.until(b"Z")) == ["D", "D", "s", "Z"]
        c.send(execute("p1", 0), sync())
        rest = c.until(b"Z")
        assert tags(rest) == ["D", "C", "Z"]
        assert rest[1][1] == b"SELECT 1\0"
        c.send(query("COMMIT"))
        assert c.until(b"Z")[-1][1] == b"I"
    finally:
        c.close()


def test_parameter_status_and_startup_options(server):
    c = Client(server.port, options="-c TimeZone=Europe/Paris -c cq.mode=snapshot",
               application_name="probe")
    try:
        for name in ("server_version", "server_encoding", "client_encoding", "DateStyle",
                     "IntervalStyle", "integer_datetimes", "standard_conforming_strings",
                     "TimeZone", "application_name", "is_superuser",
                     "session_authorization"):
            assert name in c.params, name
        assert c.params["server_version"].startswith("15.")
        assert c.params["TimeZone"] == "Europe/Paris"
        assert c.params["application_name"] == "probe"
        assert c.params["DateStyle"] == "ISO, MDY"
        c.send(query("SET application_name = 'renamed'; SHOW cq.mode"))
        out = c.until(b"Z")
        status = [b for t, b in out if t == b"S"]
        assert status == [b"application_name\0renamed\0"]
        rows = [b for t, b in out if t == b"D"]
        assert rows and rows[0].endswith(b"snapshot")
    finally:
        c.close()


def test_timestamptz_in_session_time_zone(server):
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'Asia/Kolkata'")
        assert conn.info.parameter_status("TimeZone") == "Asia/Kolkata"
        (ts,) = conn.execute("SELECT CAST('2024-01-01 00:00:00+00' AS TIMESTAMPTZ)").fetchone()
        assert (ts.hour, ts.minute) == (5, 30)
        assert ts.utcoffset() == dt.timedelta(hours=5, minutes=30)


def test_cancel_ends_the_query_and_keeps_the_session(server):
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        timer = threading.Timer(1.0, conn.cancel)
        timer.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT count(*) FROM range(100000000000) a")
        timer.cancel()
        assert time.monotonic() - started < 30
        assert conn.execute("SELECT 'alive'").fetchone() == ("alive",)


def test_data_survives_restart(start_server, tmp_path):
    data = str(tmp_path / "data")
    s = start_server(data_dir=data)
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shop")
        conn.execute("CREATE TABLE shop.items (id INT PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO shop.items VALUES (1, 'kept')")
        conn.execute("CREATE VIEW shop.names AS SELECT name FROM shop.items")
    assert s.stop() == 0
    s2 = start_server(data_dir=data)
    with psycopg.connect(s2.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT name FROM shop.names").fetchall() == [("kept",)]
        rel = conn.execute("SELECT relkind FROM pg_class WHERE relname = 'items'").fetchone()
        assert rel == ("r",)
