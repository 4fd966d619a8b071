"""What pgcli does on connect, run in pgcli's venv: PGExecute's catalog queries, then the
completion refresher (every step: schemata, tables, views, types, databases, casing,
functions), then completions at two cursor positions. Prints one JSON object; an error in any
step ends the script with it, as it would end pgcli's refresh thread (and its completion)."""
import json
import sys

from pgcli.completion_refresher import CompletionRefresher
from pgcli.pgexecute import PGExecute
from pgspecial.main import PGSpecial
from prompt_toolkit.document import Document

port, stream = sys.argv[1], sys.argv[2]
executor = PGExecute(database="cq", user="cq", host="127.0.0.1", port=port)
got = {}
CompletionRefresher()._bg_refresh(executor, PGSpecial(), lambda c: got.update(completer=c),
                                  settings={"single_connection": True})
completer = got["completer"]


def complete(text: str, at: int | None = None) -> list:
    doc = Document(text, len(text) if at is None else at)
    return sorted({c.text for c in completer.get_completions(doc, None)})


print(json.dumps({
    "search_path": executor.search_path(),
    "relations": complete("SELECT * FROM "),
    "columns": complete(f"SELECT  FROM {stream}", len("SELECT ")),
}))
