"""A user wrapper for cqgate's ingest port: lines of ``key=value`` pairs separated by spaces,
such as ``house=3 kwh=1.25 t=2026-11-01T10:00:11``.

    CREATE WRAPPER kv (init = 'kv_wrapper.init', next = 'kv_wrapper.next',
                       done = 'kv_wrapper.done');
    ALTER STREAM meter ADD WRAPPER kv;

The server imports this module from its Python path or from ``<data-dir>/wrappers/``.
``init`` gets the stream's column names and returns any state; ``next`` gets the state and
one line and returns a row (a dict by column name, or a list in column order), a list of
rows, or None; an exception makes the line a bad line (logged in ``cq_ingest_errors``, the
source stays connected). ``done`` runs when the source disconnects and may return last rows.
"""


def init(columns: list) -> dict:
    return {"columns": columns, "lines": 0}


def next(state: dict, line: str):   # noqa: A001 - the name the wrapper protocol uses
    state["lines"] += 1
    return dict(pair.split("=", 1) for pair in line.split())


def done(state: dict):
    return None
