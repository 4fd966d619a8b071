"""psqlODBC through pyodbc: SQLTables, SQLColumns, a parameterised query, and
UseDeclareFetch=1 (the driver then reads through a WITH HOLD cursor in small fetches)."""
import pyodbc
import pytest


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
