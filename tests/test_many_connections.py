"""200 clients at once doing mixed work (SQL on a shared table, snapshots of a stream, continuous
cursors over it): every one gets every answer right, and all are connected at the same time."""
import threading
import time

import psycopg

from continuous import send_source, unique

CLIENTS = 200
ROWS = 600          # pushed into the stream once every client is connected


def test_200_concurrent_connections_doing_mixed_work(start_server):
    s = start_server("--max-connections", str(CLIENTS + 10))
    stream, table = unique("many"), unique("shared")
    with psycopg.connect(s.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE STREAM {stream} (a INT, t TIMESTAMP TIMESTAMPCOLUMN)")
        admin.execute(f"CREATE TABLE {table} (client INT, n INT)")
    connected = threading.Barrier(CLIENTS + 1, timeout=120)
    go, pushed = threading.Event(), threading.Event()
    results: dict = {}

    def client(i: int) -> None:
        kind = ("table", "snapshot", "cursor")[i % 3]
        try:
            with psycopg.connect(s.dsn, autocommit=kind != "cursor", connect_timeout=60) as c:
                if kind == "cursor":
                    c.execute(f"DECLARE w CURSOR FOR SELECT a FROM {stream}")
                connected.wait()
                assert go.wait(120)
                if kind == "table":
                    c.execute(f"INSERT INTO {table} SELECT %s, range FROM range(%s)", [i, i])
                    got = c.execute(f"SELECT count(*), coalesce(sum(n), 0) FROM {table} "
                                    "WHERE client = %s", [i]).fetchone()
                    results[i] = got == (i, i * (i - 1) // 2)
                elif kind == "snapshot":
                    assert pushed.wait(60)
                    c.execute("SET cq.mode = snapshot")
                    got = c.execute(f"SELECT count(*) FROM {stream} [RANGE '1 day']").fetchone()
                    results[i] = got == (ROWS,)
                else:
                    seen = []
                    deadline = time.monotonic() + 60
                    while len(seen) < ROWS and time.monotonic() < deadline:
                        seen += [r[0] for r in c.execute(
                            "FETCH ALL FROM w WITH (timeout = '1s')").fetchall()]
                    results[i] = sorted(seen) == list(range(ROWS))
        except (psycopg.Error, threading.BrokenBarrierError, AssertionError) as e:
            results[i] = repr(e)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    with psycopg.connect(s.dsn, autocommit=True) as admin:
        connected.wait()
        at_once = admin.execute("SELECT count(*) FROM pg_stat_activity").fetchone()[0]
        go.set()
        lines = "".join(f"{i},2026-11-01 00:{i // 60:02d}:{i % 60:02d}\n" for i in range(ROWS))
        assert send_source(s.ingest_port, f"csvwrapper,{stream}\n{lines}") == b""
        # snapshots read once the rows are in the back end
        deadline = time.monotonic() + 30
        admin.execute("SET cq.mode = snapshot")
        while admin.execute(f"SELECT count(*) FROM {stream} [RANGE '1 day']").fetchone() \
                != (ROWS,):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pushed.set()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        failed = {i: r for i, r in results.items() if r is not True}
        assert len(results) == CLIENTS and not failed, failed
        assert at_once >= CLIENTS + 1          # every client, and this one
        total = admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        assert total == sum(i for i in range(0, CLIENTS, 3))
    print(f"connections: {CLIENTS} at once, {CLIENTS // 3 + 1} continuous cursors, "
          f"{ROWS} rows checked in each")
    assert s.alive()
