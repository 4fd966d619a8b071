"""pgjdbc through a small Java program that the test compiles and runs."""
import glob
import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _driver_jar() -> str:
    jars = sorted(glob.glob("/usr/share/java/postgresql*.jar"))
    if not jars:
        pytest.fail("the PostgreSQL JDBC driver is missing: run scripts/setup.sh")
    return "/usr/share/java/postgresql.jar" if "/usr/share/java/postgresql.jar" in jars \
        else jars[0]


def test_jdbc(server, table_name, tmp_path):
    if shutil.which("javac") is None:
        pytest.fail("javac (JDK 17) is required for the JDBC test")
    src = os.path.join(HERE, "drivers", "jdbc", "JdbcCheck.java")
    subprocess.run(["javac", "-d", str(tmp_path), src], check=True, timeout=120)
    cp = f"{tmp_path}{os.pathsep}{_driver_jar()}"
    url = f"jdbc:postgresql://127.0.0.1:{server.port}/cq"
    r = subprocess.run(["java", "-cp", cp, "JdbcCheck", url, table_name], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert "product=PostgreSQL 15" in out
    assert any(line.startswith("schemas=") and "public," in line for line in out)
    assert f"table={table_name}:TABLE" in out
    assert "column=a:int4:4:NO" in out
    assert "column=b:text:12:NO" in out
    assert "column=c:numeric:2:YES" in out
    assert "column=d:timestamp:93:YES" in out
    assert f"pk=a:1:{table_name}_pkey" in out
    privileges = {line for line in out if line.startswith("priv=")}
    assert "priv=cq:PUBLIC:SELECT" in privileges          # the GRANT, as pgjdbc reads relacl
    assert {"priv=cq:cq:SELECT", "priv=cq:cq:INSERT", "priv=cq:cq:DELETE"} <= privileges
    assert "typeinfo=true" in out
    assert [line for line in out if line.startswith("prepared")] == \
        [f"prepared{i}={10 - (i + 4)}" for i in range(6)]
    assert f"rsmeta=a:numeric:{table_name}:0" in out
    assert "last=2.50|2024-01-01 10:00:00.0" in out
    assert "fetched=10:55" in out
