"""The Python clients data people use besides psycopg 3 and asyncpg, each driven for real:
psycopg2 (parameters of every common type, a named cursor following a stream, copy_expert),
pg8000 (native and DB-API), the ADBC PostgreSQL driver (Arrow tables through binary COPY, a
continuous query batch by batch, adbc_ingest), pandas.read_sql and polars' read_database
(SQLAlchemy) and read_database_uri (ADBC and connectorx)."""
from __future__ import annotations

import datetime as dt
import decimal
import io
import threading
import time
import uuid

import adbc_driver_postgresql.dbapi as adbc
import pandas as pd
import pg8000.dbapi
import pg8000.native
import polars as pl
import psycopg
import psycopg2
import psycopg2.extras
import pyarrow as pa
import pytest
import sqlalchemy as sa

from continuous import lit, unique, wait_running

psycopg2.extras.register_uuid()
# one value of each common type, as the client's Python value
VALUES = [1, 2 ** 40, 1.5, decimal.Decimal("3.25"), "it's \\ \"quoted\"",
          dt.datetime(2026, 1, 2, 3, 4, 5, 6),
          dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
          dt.date(2026, 1, 2), dt.time(1, 2, 3), True, b"\x00\x01",
          uuid.UUID("a1b2c3d4-0000-4000-8000-000000000001"), dt.timedelta(days=3, seconds=5),
          [1, 2, None], None]
COLUMNS = ("i INT, b BIGINT, f DOUBLE PRECISION, n DECIMAL(10,2), t TEXT, ts TIMESTAMP, "
           "tz TIMESTAMPTZ, d DATE, tm TIME, bo BOOLEAN, by BYTEA, u UUID, iv INTERVAL, "
           "arr INT[], nothing TEXT")


def _uri(server) -> str:
    return f"postgresql://cq@127.0.0.1:{server.port}/cq"


def _stream_rows(server, stream: str, n: int) -> None:
    """``n`` rows (k, one event-time second apart) into ``stream``, once a query reads it."""
    wait_running(server.dsn, f"FROM {stream}")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"INSERT INTO {stream} VALUES " +
                  ", ".join(f"({k}, {lit(k)})" for k in range(n)))


def _stream(server) -> str:
    name = unique("pyc")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE STREAM {name} (k INT, t TIMESTAMP TIMESTAMPCOLUMN)")
    return name


def test_psycopg2_parameters_named_cursor_and_copy(server):
    table = unique("p2")
    conn = psycopg2.connect(server.dsn)
    conn.autocommit = True
    cur = conn.cursor()
    for v in VALUES:                  # psycopg2 writes each value into the SQL as a literal
        cur.execute("SELECT %s", (v,))
        got = cur.fetchone()[0]
        assert (bytes(got) if isinstance(got, memoryview) else got) == v, v
    cur.execute(f"CREATE TABLE {table} ({COLUMNS})")
    cur.execute(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(VALUES))})", VALUES)
    cur.execute(f"SELECT * FROM {table}")
    row = [bytes(v) if isinstance(v, memoryview) else v for v in cur.fetchone()]
    assert row == VALUES
    out = io.StringIO()
    cur.copy_expert(f"COPY (SELECT i, t FROM {table}) TO STDOUT WITH (FORMAT csv)", out)
    assert out.getvalue() == '1,"it\'s \\ ""quoted"""\n'
    cur.copy_expert(f"COPY {table} (i, t) FROM STDIN", io.StringIO("5\tfrom copy\n"))
    cur.execute(f"SELECT t FROM {table} WHERE i = 5")
    assert cur.fetchone() == ("from copy",)

    # a named (server-side) cursor over a continuous query, read itersize rows at a time
    stream = _stream(server)
    follow = psycopg2.connect(server.dsn)
    named = follow.cursor(name="follow")
    named.itersize = 7
    named.execute(f"SELECT k FROM {stream}")
    feeder = threading.Thread(target=_stream_rows, args=(server, stream, 40), daemon=True)
    feeder.start()
    got = []
    for (k,) in named:
        got.append(k)
        if len(got) == 30:
            break
    assert got == list(range(30))
    follow.rollback()                 # the cursor ends with its transaction
    follow.close()
    feeder.join(30)
    wait_running(server.dsn, f"FROM {stream}", count=0)
    conn.close()


def test_pg8000_native_and_dbapi(server):
    table = unique("p8")
    native = pg8000.native.Connection("cq", host="127.0.0.1", port=server.port, database="cq")
    native.run(f"CREATE TABLE {table} (i INT, t TEXT, ts TIMESTAMP, n DECIMAL(10,2))")
    native.run(f"INSERT INTO {table} VALUES (:i, :t, :ts, :n)", i=1, t="one",
               ts=dt.datetime(2026, 1, 2, 3, 4, 5), n=decimal.Decimal("1.50"))
    assert native.run(f"SELECT i, t, ts, n FROM {table} WHERE i = :i", i=1) == \
        [[1, "one", dt.datetime(2026, 1, 2, 3, 4, 5), decimal.Decimal("1.50")]]
    assert [c["name"] for c in native.columns] == ["i", "t", "ts", "n"]
    with pytest.raises(pg8000.native.DatabaseError) as e:
        native.run("SELECT nope FROM nowhere")
    assert e.value.args[0]["C"] == "42P01"
    assert native.run("SELECT 1") == [[1]]             # the session goes on
    native.close()

    conn = pg8000.dbapi.connect(user="cq", host="127.0.0.1", port=server.port, database="cq")
    cur = conn.cursor()
    cur.executemany(f"INSERT INTO {table} (i, t) VALUES (%s, %s)", [(2, "two"), (3, "three")])
    conn.commit()
    cur.execute(f"SELECT i, t FROM {table} WHERE i >= %s ORDER BY i", (2,))
    assert cur.fetchall() == ([2, "two"], [3, "three"])
    conn.close()


def test_adbc_reads_tables_snapshots_and_a_continuous_query_as_arrow(server):
    table, stream = unique("adbc"), _stream(server)
    with adbc.connect(_uri(server)) as conn, conn.cursor() as cur:
        data = pa.table({"x": pa.array([1, 2, 3], pa.int64()), "y": ["a", None, "c"],
                         "z": [1.5, 2.5, None],
                         "at": pa.array([dt.datetime(2026, 1, 1, 0, 0, k) for k in range(3)],
                                        pa.timestamp("us"))})
        assert cur.adbc_ingest(table, data, mode="create") == 3     # through binary COPY
        conn.commit()
        cur.execute(f"SELECT * FROM {table} ORDER BY x")
        assert cur.fetch_arrow_table().equals(data)

        # a stream's window at now, as a snapshot
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute(f"INSERT INTO {stream} VALUES (1, {lit(1)}), (2, {lit(2)})")
        cur.execute("SET cq.mode = snapshot")
        cur.execute(f"SELECT k FROM {stream} [RANGE '1 hour'] ORDER BY k")
        assert cur.fetch_arrow_table().column("k").to_pylist() == [1, 2]
        cur.execute("SET cq.mode = continuous")
        conn.commit()

        # a continuous query, batch by batch as its rows come
        stream = _stream(server)
        cur.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": "1"})
        feeder = threading.Thread(target=_stream_rows, args=(server, stream, 12), daemon=True)
        feeder.start()
        cur.execute(f"SELECT k, valid_from FROM {stream} WHERE k >= 0 LIMIT 10")
        batches = list(cur.fetch_record_batch())
        feeder.join(30)
        got = pa.Table.from_batches(batches)
        assert got.column("k").to_pylist() == list(range(10))
        assert got.schema.field("valid_from").type == pa.timestamp("us")
        assert len(batches) > 1


def test_pandas_and_polars_read_through_sqlalchemy_adbc_and_connectorx(server):
    table = unique("frames")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (k INT, name TEXT, price DOUBLE PRECISION, at TIMESTAMP)")
        c.execute(f"INSERT INTO {table} VALUES (1, 'a', 1.5, TIMESTAMP '2026-01-01 00:00:01'), "
                  "(2, NULL, 2.5, NULL)")
    sql = f"SELECT k, name, price, at FROM {table} ORDER BY k"
    expected = pl.DataFrame({"k": [1, 2], "name": ["a", None], "price": [1.5, 2.5],
                             "at": [dt.datetime(2026, 1, 1, 0, 0, 1), None]},
                            schema_overrides={"k": pl.Int32, "at": pl.Datetime("us")})
    engine = sa.create_engine(f"postgresql+psycopg://cq@127.0.0.1:{server.port}/cq")
    with engine.connect() as c:
        frame = pd.read_sql(sa.text(sql), c)
        assert frame["k"].tolist() == [1, 2] and frame["name"].tolist() == ["a", None]
        polars_sa = pl.read_database(sql, c)
    engine.dispose()
    assert polars_sa.with_columns(pl.col("at").cast(pl.Datetime("us"))).equals(expected)
    assert pl.read_database_uri(sql, _uri(server), engine="adbc").equals(expected)
    by_cx = pl.read_database_uri(sql, _uri(server), engine="connectorx")
    assert by_cx.select("name", "price").equals(expected.select("name", "price"))
    assert by_cx["k"].to_list() == [1, 2]
