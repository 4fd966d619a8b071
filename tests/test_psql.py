"""psql 15 as a subprocess: catalog commands, a FETCH_COUNT session, \\copy, errors."""
import re

from conftest import psql


def test_tables_and_describe(server, table_name):
    r = psql(server, "-c", f"CREATE TABLE {table_name} (a INT PRIMARY KEY, b TEXT DEFAULT 'q' "
                           f"NOT NULL, c NUMERIC(10,2))",
             "-c", f"INSERT INTO {table_name} VALUES (1, 'x', 1.5), (2, 'y', NULL)",
             "-c", "\\dt", "-c", f"\\d {table_name}", "-c", f"\\d+ {table_name}", "-c", "\\dn",
             "-c", "\\l")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    # other tests' relations and schemas share the listing, so the columns may be wider
    assert re.search(rf" public +\| {table_name} +\| table +\| cq$", out, re.M), out
    assert f'Table "public.{table_name}"' in out
    assert " a      | integer       |           | not null | " in out
    assert " b      | text          |           | not null | 'q'" in out
    assert " c      | numeric(10,2) |           |          | " in out
    assert f'"{table_name}_pkey" PRIMARY KEY, btree (a)' in out
    assert "List of schemas" in out and " public | cq" in out
    assert "List of databases" in out and re.search(r" cqgate \| cq +\| UTF8", out)


def test_fetch_count_session(server, table_name):
    script = (f"CREATE TABLE {table_name} (a INT, b TEXT);\n"
              f"INSERT INTO {table_name} SELECT g, 'x' || g FROM generate_series(1, 5) g;\n"
              "\\set FETCH_COUNT 2\n"
              f"SELECT * FROM {table_name} ORDER BY a;\n"
              "SELECT 1 AS one;\n")
    r = psql(server, "-f", "-", stdin=script)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = [ln.strip() for ln in r.stdout.splitlines()]
    for i in range(1, 6):
        assert f"{i} | x{i}" in lines
    assert "(5 rows)" in lines
    assert "(1 row)" in lines


def test_copy_in_and_out(server, table_name, tmp_path):
    src = tmp_path / "in.tsv"
    src.write_text("1\tone\n2\t\\N\n3\ttab\\there\n")
    csv_out = tmp_path / "out.csv"
    r = psql(server, "-c", f"CREATE TABLE {table_name} (a INT, b TEXT)",
             "-c", f"\\copy {table_name} from '{src}'",
             "-c", f"\\copy (SELECT * FROM {table_name} ORDER BY a) to '{csv_out}' csv header",
             "-c", f"SELECT count(*), count(b) FROM {table_name}")
    assert r.returncode == 0, r.stderr
    assert "COPY 3" in r.stdout
    assert csv_out.read_text() == "a,b\n1,one\n2,\n3,tab\there\n"
    assert "     3 |     2" in r.stdout


def test_copy_csv_in_with_quotes_and_nulls(server, table_name, tmp_path):
    src = tmp_path / "in.csv"
    src.write_text('a,b\n1,"comma, inside"\n2,\n3,""\n4,"say ""hi"""\n')
    r = psql(server, "-c", f"CREATE TABLE {table_name} (a INT, b TEXT)",
             "-c", f"\\copy {table_name} from '{src}' csv header",
             "-c", f"SELECT a, b IS NULL, b FROM {table_name} ORDER BY a", "-A", "-t")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-4:] == ["1|f|comma, inside", "2|t|", "3|f|", '4|f|say "hi"']


def test_copy_bad_data_is_reported(server, table_name, tmp_path):
    src = tmp_path / "bad.tsv"
    src.write_text("1\tok\n2\tok\textra\n")
    r = psql(server, "-c", f"CREATE TABLE {table_name} (a INT, b TEXT)",
             "-c", f"\\copy {table_name} from '{src}'",
             "-c", f"SELECT count(*) FROM {table_name}", "-A", "-t")
    assert "ERROR:  extra data after last expected column" in r.stderr
    assert r.stdout.splitlines()[-1] == "0"        # COPY is all or nothing


def test_errors_keep_the_session(server):
    r = psql(server, "-c", "SELECT * FROM no_such_table", "-c", "SELEC 1", "-c", "SELECT 2 AS two")
    assert 'ERROR:  relation "no_such_table" does not exist' in r.stderr
    assert "LINE 1: SELECT * FROM no_such_table" in r.stderr
    assert "ERROR:  syntax error" in r.stderr
    assert " two \n-----\n   2\n" in r.stdout
