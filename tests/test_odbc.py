"""psqlODBC through pyodbc: SQLTables, SQLColumns, a parameterised query, UseDeclareFetch=1
(the driver then reads through a WITH HOLD cursor in small fetches), and every catalog
function BI tools call, with both UseDeclareFetch settings."""
import json
import os
import subprocess
import sys

import pyodbc
import pytest

from continuous import unique

HERE = os.path.dirname(os.path.abspath(__file__))


def _connect(server, **extra):
    drivers = [d for d in pyodbc.drivers() if "PostgreSQL Unicode" in d]
    if not drivers:
        pytest.fail("psqlODBC is not installed: run scripts/setup.sh")
    opts = {"Driver": "{" + drivers[0] + "}", "Server": "127.0.0.1", "Port": server.port,
            "Database": "cq", "Uid": "cq", "Pwd": "", "SSLmode": "disable", **extra}
    return pyodbc.connect(";".join(f"{k}={v}" for k, v in opts.items()), timeout=10)


def test_catalog_and_parameters(server, table_name):
    with _connect(server) as conn:
        cur = conn.cursor()
        cur.execute(f"CREATE TABLE {table_name} (id INT PRIMARY KEY, name VARCHAR NOT NULL, "
                    "price NUMERIC(8,2))")
        cur.execute(f"INSERT INTO {table_name} VALUES (1, 'tea', 2.50), (2, 'cake', 4.25), "
                    "(3, 'jam', NULL)")
        conn.commit()
        tables = [r.table_name for r in cur.tables(table=table_name, schema="public")]
        assert tables == [table_name]
        cols = [(r.column_name, r.type_name, r.nullable)
                for r in cur.columns(table=table_name, schema="public")]
        assert cols == [("id", "int4", 0), ("name", "text", 0), ("price", "numeric", 1)]
        rows = cur.execute(f"SELECT id, name, price FROM {table_name} WHERE id >= ? "
                           "ORDER BY id", 2).fetchall()
        assert [tuple(r) for r in rows][0][:2] == (2, "cake")
        assert float(rows[0][2]) == 4.25 and rows[1][2] is None


def test_use_declare_fetch(server, table_name):
    with _connect(server, UseDeclareFetch=1, Fetch=2) as conn:
        cur = conn.cursor()
        cur.execute(f"CREATE TABLE {table_name} (a INT, b TEXT)")
        cur.execute(f"INSERT INTO {table_name} SELECT g, 'v' || g FROM generate_series(1, 7) g")
        conn.commit()
        got = [tuple(r) for r in cur.execute(f"SELECT a, b FROM {table_name} ORDER BY a")]
        assert got == [(i, f"v{i}") for i in range(1, 8)]
        conn.commit()


@pytest.mark.parametrize("use_declare_fetch", [0, 1])
def test_catalog_functions_answer_as_postgresql_does(server, use_declare_fetch):
    """SQLTables, SQLColumns, SQLPrimaryKeys, SQLForeignKeys, SQLStatistics,
    SQLSpecialColumns, SQLGetTypeInfo, SQLProcedures and SQLProcedureColumns, each in the
    driver as Excel, Power BI and Tableau call it; the expected rows are what the same calls
    return against PostgreSQL 15 for the same tables. SQLStatistics used to crash the driver
    (it read a pg_index key sent as int2[] into its int2vector array), SQLProcedureColumns too
    (an error there makes the driver free its result twice)."""
    t, u, s, w = (unique(p) for p in ("odt", "odu", "ods", "odw"))
    with _connect(server) as conn:
        cur = conn.cursor()
        for sql in [f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR)",
                    f"CREATE TABLE {u} (id INT PRIMARY KEY, t_id INT REFERENCES {t}(id))",
                    f"CREATE INDEX {t}_name_idx ON {t}(name)",
                    f"CREATE UNIQUE INDEX {u}_tid_uq ON {u}(t_id)",
                    f"CREATE STREAM {s} (a INT, ts TIMESTAMP TIMESTAMPCOLUMN)",
                    f"CREATE WINDOW {w} AS SELECT a, count(*) AS n FROM {s} [RANGE '1 minute'] "
                    "GROUP BY a"]:
            cur.execute(sql)
        conn.commit()
    run = subprocess.run([sys.executable, os.path.join(HERE, "drivers", "odbc_catalog.py"),
                          str(server.port), str(use_declare_fetch), t, u, s, w],
                         capture_output=True, text=True, timeout=120)
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 0, (f"the driver died in {lines[-1]['call'] if lines else '?'} "
                                 f"(exit {run.returncode}): {run.stderr[-2000:]}")
    got = {r["call"]: r["rows"] for r in lines if "rows" in r}
    assert {t, u, s} <= {r["table_name"] for r in got["tables"]}          # a stream is a table
    assert w in {r["table_name"] for r in got["views"]}                   # a window a view
    assert [(r["column_name"], r["type_name"]) for r in got["columns"]] == \
        [("id", "int4"), ("name", "text")]
    assert [(r["column_name"], r["key_seq"], r["pk_name"]) for r in got["primary_keys"]] == \
        [("id", 1, f"{t}_pkey")]
    fk = [(r["pktable_name"], r["pkcolumn_name"], r["fktable_name"], r["fkcolumn_name"],
           r["key_seq"], r["fk_name"], r["pk_name"])
          for r in got["foreign_keys_of_referenced"] + got["foreign_keys_of_referencing"]]
    assert fk == [(t, "id", u, "t_id", 1, f"{u}_t_id_fkey", f"{t}_pkey")] * 2
    stats = [(r["index_name"], r["column_name"], r["non_unique"], r["ordinal_position"])
             for r in got["statistics"] if r["index_name"]]
    assert sorted(stats) == sorted([(f"{t}_pkey", "id", 0, 1), (f"{t}_name_idx", "name", 1, 1)])
    unique_stats = {(r["index_name"], r["column_name"]) for r in got["statistics_unique"]
                    if r["index_name"]}
    assert unique_stats == {(f"{u}_pkey", "id"), (f"{u}_tid_uq", "t_id")}
    assert got["row_id_columns"] == []
    assert [r["column_name"] for r in got["row_version_columns"]] == ["xmin"]
    assert len(got["type_info"]) == 25 and "int4" in {r["type_name"] for r in got["type_info"]}
    # cqgate has no stored procedures: both lists are empty (PostgreSQL lists its built-ins)
    assert got["procedures"] == [] and got["procedure_columns"] == []
