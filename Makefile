# The two commands of the README: `make run` serves on the embedded default, `make test` passes
# the tests. Both install what a fresh machine lacks first.
PY ?= python3

.PHONY: setup run test
setup:
	./scripts/setup.sh

run: setup
	$(PY) -m gateway serve

test: setup
	./scripts/test.sh
