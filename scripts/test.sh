#!/usr/bin/env bash
# Run the whole test suite; pytest's "no tests collected" (exit 5) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${CQGATE_PYTHON:-python3}
# the heavy client tools' venvs (Superset, pgcli, psql 17/18) are made here, once, so that the
# minutes a fresh machine spends installing them count against no test's timeout
"$PY" tests/tool_venvs.py || exit $?
"$PY" -m pytest -q "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "no tests were collected: failing" >&2
    exit 1
fi
exit $rc
