#!/usr/bin/env bash
# Install everything cqgate and its tests need on a fresh machine (Python 3.11, JDK 17 and psql
# are assumed present): the ODBC driver, unixODBC, the JDBC driver, netcat, tmux, Chromium and
# its driver from apt when missing, and the Python package with its test extras into the
# current Python (or $CQGATE_PYTHON). Tests make the heavy tools' venvs themselves
# (tests/tool_venvs.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${CQGATE_PYTHON:-python3}

need_apt=()
dpkg -s odbc-postgresql >/dev/null 2>&1 || need_apt+=(odbc-postgresql)
dpkg -s unixodbc >/dev/null 2>&1 || need_apt+=(unixodbc)
dpkg -s unixodbc-dev >/dev/null 2>&1 || need_apt+=(unixodbc-dev)
dpkg -s libpostgresql-jdbc-java >/dev/null 2>&1 || need_apt+=(libpostgresql-jdbc-java)
dpkg -s netcat-openbsd >/dev/null 2>&1 || need_apt+=(netcat-openbsd)   # clients/sources/source.sh
dpkg -s tmux >/dev/null 2>&1 || need_apt+=(tmux)                       # tests/test_pgcli.py
dpkg -s chromium >/dev/null 2>&1 || need_apt+=(chromium)               # tests/test_metrics.py
dpkg -s chromium-driver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

"$PY" -m pip install -q --disable-pip-version-check -e ".[test]"
