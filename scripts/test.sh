#!/usr/bin/env bash
# Run the whole test suite; pytest's "no tests collected" (exit 5) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${CQGATE_PYTHON:-python3}
# the heavy client tools' venvs (Superset, pgcli, psql 17/18) are made here, once, so that the
# minutes a fresh machine spends installing them count against no test's timeout
"$PY" tests/tool_venvs.py || exit $?
# two processes share the tests, a file at a time (a file's servers and fixtures stay in one
# process): the suite waits on servers, Spark and clients much of the time, and one process
# kept a two-core machine less than half busy. CQGATE_TEST_WORKERS=0 runs them in this one.
"$PY" -m pytest -q -n "${CQGATE_TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "no tests were collected: failing" >&2
    exit 1
fi
exit $rc
