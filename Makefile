# The two commands of the README: `make run` serves on the embedded default, `make test` passes
# the tests. Both install what a fresh machine lacks first.
PY ?= python3

.PHONY: setup run test postgres
setup:
	./scripts/setup.sh

run: setup
	$(PY) -m gateway serve

test: setup
	./scripts/test.sh

# a throwaway PostgreSQL 18 (wal_level=logical, on 127.0.0.1) to try sources and sinks on:
# docs/sources.md (its examples' port is PGPORT's default); PGDATA_DIR keeps its data
PGDATA_DIR ?= .postgres
PGPORT ?= 5432
postgres: setup
	$(PY) -m scripts.embedded_postgres --datadir $(PGDATA_DIR) --port $(PGPORT)
