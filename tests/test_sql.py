"""Static-table SQL and session statements through psycopg: schemas, DDL with constraints,
DML with RETURNING, views, SQL cursors (DECLARE / FETCH / MOVE / CLOSE [ALL], WITH HOLD),
transactions and savepoints, SET / SHOW / RESET, DEALLOCATE and DISCARD ALL."""
import psycopg
from psycopg import pq
import pytest
from psycopg import sql


@pytest.fixture
def conn(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        yield c


def test_ddl_dml_returning_and_views(conn, table_name):
    t = sql.Identifier(table_name)
    conn.execute("CREATE SCHEMA IF NOT EXISTS inventory")
    conn.execute(sql.SQL("CREATE TABLE inventory.{} (id INT PRIMARY KEY, name TEXT NOT NULL, "
                         "qty INT DEFAULT 0)").format(t))
    rows = conn.execute(sql.SQL("INSERT INTO inventory.{} (id, name) VALUES (1, 'bolt'), "
                                "(2, 'nut') RETURNING id, qty").format(t)).fetchall()
    assert rows == [(1, 0), (2, 0)]
    cur = conn.execute(sql.SQL("UPDATE inventory.{} SET qty = qty + 5 WHERE id = %s "
                               "RETURNING *").format(t), (2,))
    assert cur.fetchall() == [(2, "nut", 5)]
    cur = conn.execute(sql.SQL("DELETE FROM inventory.{} WHERE id = 1").format(t))
    assert cur.statusmessage == "DELETE 1"
    conn.execute(sql.SQL("CREATE VIEW inventory.{} AS SELECT name FROM inventory.{} "
                         "WHERE qty > 0").format(sql.Identifier(table_name + "_v"), t))
    assert conn.execute(sql.SQL("SELECT * FROM inventory.{}").format(
        sql.Identifier(table_name + "_v"))).fetchall() == [("nut",)]
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(sql.SQL("INSERT INTO inventory.{} VALUES (2, 'dup', 1)").format(t))
    with pytest.raises(psycopg.errors.NotNullViolation):
        conn.execute(sql.SQL("INSERT INTO inventory.{} (id) VALUES (3)").format(t))


def test_sql_cursors(conn):
    conn.execute("BEGIN")
    conn.execute("DECLARE c1 SCROLL CURSOR FOR SELECT g FROM generate_series(1, 10) g ORDER BY g")
    assert conn.execute("FETCH 3 FROM c1").fetchall() == [(1,), (2,), (3,)]
    assert conn.execute("MOVE FORWARD 2 IN c1").statusmessage == "MOVE 2"
    assert conn.execute("FETCH NEXT FROM c1").fetchall() == [(6,)]
    assert conn.execute("FETCH PRIOR FROM c1").fetchall() == [(5,)]
    assert conn.execute("FETCH ABSOLUTE 9 FROM c1").fetchall() == [(9,)]
    assert conn.execute("FETCH ALL FROM c1").fetchall() == [(10,)]
    assert conn.execute("FETCH 1 FROM c1").fetchall() == []
    conn.execute("DECLARE c2 CURSOR WITH HOLD FOR SELECT 'held'")
    conn.execute("CLOSE c1")
    with pytest.raises(psycopg.errors.InvalidCursorName):
        conn.execute("FETCH 1 FROM c1")
    conn.execute("ROLLBACK")
    conn.execute("BEGIN")
    conn.execute("DECLARE c2 CURSOR WITH HOLD FOR SELECT 'held'")
    conn.execute("COMMIT")
    assert conn.execute("FETCH ALL FROM c2").fetchall() == [("held",)]   # survives COMMIT
    assert conn.execute("CLOSE ALL").statusmessage == "CLOSE CURSOR ALL"
    with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
        conn.execute("DECLARE c3 CURSOR FOR SELECT 1")


def test_transactions_and_savepoints(conn, table_name):
    t = sql.Identifier(table_name)
    conn.execute(sql.SQL("CREATE TABLE {} (a INT)").format(t))
    conn.execute("BEGIN")
    conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(t))
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    conn.execute("ROLLBACK")
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(t)).fetchone() == (0,)
    # the drivers' pattern: a savepoint around a statement that fails, then carry on
    conn.execute("BEGIN")
    conn.execute("SAVEPOINT s1")
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM not_there")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK TO SAVEPOINT s1")
    conn.execute("RELEASE s1")
    conn.execute(sql.SQL("INSERT INTO {} VALUES (2)").format(t))
    conn.execute("COMMIT")
    assert conn.execute(sql.SQL("SELECT a FROM {}").format(t)).fetchall() == [(2,)]
    # after a write, a savepoint cannot be restored by DuckDB: a clear 0A000
    conn.execute("BEGIN")
    conn.execute("SAVEPOINT s2")
    conn.execute(sql.SQL("INSERT INTO {} VALUES (3)").format(t))
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute("ROLLBACK TO SAVEPOINT s2")
    conn.execute("ROLLBACK")
    with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
        conn.execute("SAVEPOINT outside")


def test_set_show_reset_discard(conn):
    conn.execute("SET search_path TO public")
    conn.execute("SET extra_float_digits = 3")
    assert conn.execute("SHOW extra_float_digits").fetchone() == ("3",)
    assert conn.execute("SELECT current_setting('extra_float_digits')").fetchone() == ("3",)
    conn.execute("RESET extra_float_digits")
    assert conn.execute("SHOW extra_float_digits").fetchone() == ("1",)
    with pytest.raises(psycopg.errors.UndefinedObject):
        conn.execute("SHOW no_such_setting")
    names = [r[0] for r in conn.execute("SHOW ALL").fetchall()]
    assert "TimeZone" in names and "server_version" in names
    conn.execute("SET application_name = 'x'")
    conn.execute("DISCARD ALL")
    assert conn.execute("SHOW application_name").fetchone() == ("",)


def test_deallocate(server):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        # statements prepared by name in the protocol (libpq's PQprepare), then DEALLOCATE
        assert c.pgconn.prepare(b"kept", b"SELECT 1").status == pq.ExecStatus.COMMAND_OK
        assert c.pgconn.prepare(b"dropped", b"SELECT 2").status == pq.ExecStatus.COMMAND_OK
        c.execute("DEALLOCATE dropped")
        r = c.pgconn.exec_prepared(b"kept", [])
        assert (r.status, r.get_value(0, 0)) == (pq.ExecStatus.TUPLES_OK, b"1")
        r = c.pgconn.exec_prepared(b"dropped", [])
        assert r.error_field(pq.DiagnosticField.SQLSTATE) == b"26000"
        c.execute("DEALLOCATE ALL")
        r = c.pgconn.exec_prepared(b"kept", [])
        assert r.error_field(pq.DiagnosticField.SQLSTATE) == b"26000"
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            c.execute("DEALLOCATE nope")
