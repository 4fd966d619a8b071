"""Session commands, read once when a statement is prepared: ``read_command`` reads the lexer's
tokens into a typed command (BEGIN … COPY), or gives None for a statement that is no session
command and goes to the SQL translator. A malformed command is a 42601 with its position.

Each command says whether it returns rows and whether a failed transaction still accepts it;
``gateway/sessions/commands.py`` runs them through a table keyed by type.
"""
from __future__ import annotations

from dataclasses import dataclass

from gateway.pgwire import errors as E
from gateway.syntax.lexer import Statement
from gateway.syntax.token_reader import TokenReader as _Reader
from gateway.syntax import role_syntax


class Command:
    returns_rows = False
    allowed_when_failed = False    # ROLLBACK, and COMMIT, which then rolls back


@dataclass(frozen=True)
class Begin(Command):
    pass


@dataclass(frozen=True)
class Commit(Command):
    allowed_when_failed = True


@dataclass(frozen=True)
class Rollback(Command):
    allowed_when_failed = True


@dataclass(frozen=True)
class RollbackTo(Command):
    savepoint: str
    allowed_when_failed = True


@dataclass(frozen=True)
class Savepoint(Command):
    name: str


@dataclass(frozen=True)
class Release(Command):
    savepoint: str


@dataclass(frozen=True)
class Set(Command):
    name: str | None       # None: a SET that cqgate accepts and ignores (SET TRANSACTION …)
    value: str | None      # None: DEFAULT
    local: bool = False


@dataclass(frozen=True)
class Reset(Command):
    name: str | None       # None: RESET ALL


@dataclass(frozen=True)
class Show(Command):
    name: str | None       # None: SHOW ALL
    returns_rows = True


@dataclass(frozen=True)
class Declare(Command):
    name: str
    hold: bool
    query: Statement | None    # the text after FOR, placed in the client's query string
    # the query begins as a session command does (SHOW, FETCH …), which returns no cursor's
    # rows: known from the tokens read here, so the query is never lexed again for it
    query_is_command: bool = False


@dataclass(frozen=True)
class Fetch(Command):
    move: bool             # MOVE: positions the cursor, returns no rows
    direction: str         # "" | next | prior | first | last | all | forward | backward | absolute | relative
    count: str             # "" | a signed integer | all
    cursor: str
    timeout: str | None    # WITH (timeout = …) on a continuous query's cursor

    @property
    def returns_rows(self) -> bool:
        return not self.move


@dataclass(frozen=True)
class Close(Command):
    name: str | None       # None: CLOSE ALL


@dataclass(frozen=True)
class Deallocate(Command):
    name: str | None       # None: DEALLOCATE ALL


@dataclass(frozen=True)
class Discard(Command):
    what: str


@dataclass(frozen=True)
class Listen(Command):
    tag: str               # LISTEN or UNLISTEN


@dataclass(frozen=True)
class CopyRequest(Command):
    """A COPY the connection carries out (it owns the CopyData stream)."""
    direction: str            # "in" | "out"
    table: str | None         # target/source table (schema-qualified text as written)
    columns: list | None
    query: Statement | None   # COPY (query) TO STDOUT, placed in the client's query string
    csv: bool
    header: bool
    delimiter: str
    null: str
    quote: str
    escape: str
    format: str = "text"
    file: str | None = None   # COPY … FROM/TO 'file' on the server, instead of STDIN/STDOUT
    query_is_command: bool = False   # the query begins as a session command does (SHOW …)


# ---------------------------------------------------------------------- transactions
def _begin(r: _Reader) -> Command:
    return Begin()          # transaction modes (ISOLATION LEVEL …) are accepted as they come


def _start(r: _Reader) -> Command:
    r.expect("transaction")
    return Begin()


def _chain(r: _Reader) -> None:
    r.accept("work", "transaction")
    if r.accept("and"):
        r.accept("no")
        r.expect("chain")
    r.end()


def _commit(r: _Reader) -> Command | None:
    if r.at("prepared"):
        return None         # two-phase commit: left to the SQL path, which refuses it
    _chain(r)
    return Commit()


def _rollback(r: _Reader) -> Command | None:
    if r.at("prepared"):
        return None
    r.accept("work", "transaction")
    if r.accept("to"):
        r.accept("savepoint")
        savepoint = r.name()
        r.end()
        return RollbackTo(savepoint)
    _chain(r)
    return Rollback()


def _savepoint(r: _Reader) -> Command:
    name = r.name()
    r.end()
    return Savepoint(name)


def _release(r: _Reader) -> Command:
    r.accept("savepoint")
    name = r.name()
    r.end()
    return Release(name)


# ---------------------------------------------------------------------- settings
# spellings of SHOW / RESET targets with spaces -> the setting's name
ALIASES = {("transaction", "isolation", "level"): "transaction_isolation",
           ("time", "zone"): "TimeZone", ("session", "authorization"): "session_authorization"}
_IGNORED_SET = (("session", "characteristics"), ("session", "authorization"), ("transaction",),
                ("constraints",), ("role",))


def _starts(r: _Reader, words: tuple) -> bool:
    return all(r.peek(k) is not None and r.peek(k).is_word(w) for k, w in enumerate(words))


def _target(r: _Reader) -> str | None:
    """A SHOW or RESET target: ALL (None), a spelling with spaces, or a setting's name."""
    if r.accept("all"):
        r.end()
        return None
    for words, name in ALIASES.items():
        if _starts(r, words):
            r.i += len(words)
            r.end()
            return name
    name = r.dotted()
    r.end()
    return name


def _values(r: _Reader) -> str:
    """A setting's value list: strings and names unquoted, other items as written."""
    items, group = [], []
    while True:
        tok = r.peek()
        if tok is None or (tok.kind == "symbol" and tok.value == ","):
            if not group:
                r.error(tok)
            one = group[0]
            items.append(one.value if len(group) == 1 and one.kind in ("string", "name")
                         else r.stmt.text[one.start:group[-1].end])
            if tok is None:
                return ", ".join(items)
            group = []
        else:
            group.append(tok)
        r.i += 1


def _set(r: _Reader) -> Command:
    if any(_starts(r, words) for words in _IGNORED_SET):
        return Set(None, None)
    local = r.accept("session", "local") == "local"
    if any(_starts(r, words) for words in _IGNORED_SET):
        return Set(None, None)
    if r.accept("time"):
        r.expect("zone")
        name = "TimeZone"
    else:
        name = r.dotted()
        if not r.symbol("="):
            r.expect("to")
    if r.at("default") and r.peek(1) is None:
        return Set(name, None, local)
    return Set(name, _values(r), local)


def _reset(r: _Reader) -> Command:
    return Reset(_target(r))


def _show(r: _Reader) -> Command:
    return Show(_target(r))


def _discard(r: _Reader) -> Command:
    what = r.expect("all", "plans", "sequences", "temp", "temporary")
    r.end()
    return Discard(what)


def _listen(r: _Reader) -> Command:
    # Accepted so connection pools' reset queries work; cqgate sends no notifications.
    return Listen(r.toks[0].value.upper())


def _deallocate(r: _Reader) -> Command:
    r.accept("prepare")
    name = None if r.accept("all") else r.name()
    r.end()
    return Deallocate(name)


# ---------------------------------------------------------------------- cursors
def _declare(r: _Reader) -> Command:
    name = r.name()
    r.accept("binary")
    r.accept("asensitive", "insensitive")
    if r.accept("no"):
        r.expect("scroll")
    else:
        r.accept("scroll")
    r.expect("cursor")
    hold = r.accept("with", "without")
    if hold:
        r.expect("hold")
    r.expect("for")
    first = r.peek()
    query = None if first is None else Statement(
        r.stmt.text[first.start:], r.stmt.offset + first.start, r.stmt.max_param)
    return Declare(name, hold == "with", query, _begins_command(first))


_DIRECTIONS = ("next", "prior", "first", "last", "all", "forward", "backward")
_COUNTED = ("absolute", "relative", "forward", "backward")


def _count(r: _Reader) -> str | None:
    sign = "-" if r.symbol("-") else "+" if r.symbol("+") else ""
    tok = r.peek()
    if tok is not None and tok.kind == "number" and tok.value.isdigit():
        r.i += 1
        return sign + tok.value
    if sign:
        r.error(tok)
    return None


def _timeout(r: _Reader) -> str | None:
    if not r.accept("with"):
        return None
    if not r.symbol("("):
        r.error()
    r.expect("timeout")
    if not r.symbol("="):
        r.error()
    tok = r.take()
    if tok.kind not in ("string", "number"):
        r.error(tok)
    if not r.symbol(")"):
        r.error()
    return tok.value


def _fetch(r: _Reader) -> Command:
    move = r.toks[0].is_word("move")
    direction, count = "", ""
    # a direction word is one only when a cursor name follows it
    nxt = r.peek(1)
    if r.at(*_DIRECTIONS, *_COUNTED) and nxt is not None and not nxt.is_word("with"):
        direction = r.take().value.lower()
        if direction in _COUNTED:
            count = _count(r) or (r.accept("all") if direction in ("forward", "backward")
                                  else None) or ""
    else:
        count = _count(r) or ""
    r.accept("from", "in")
    cursor = r.name()
    timeout = _timeout(r)
    r.end()
    return Fetch(move, direction, count, cursor, timeout)


def _close(r: _Reader) -> Command:
    name = None if r.accept("all") else r.name()
    r.end()
    return Close(name)


# ---------------------------------------------------------------------- COPY
_LEGACY_VALUED = ("delimiter", "null", "quote", "escape", "encoding")


def _copy_options(r: _Reader) -> dict:
    """COPY's options, in the parenthesised form or PostgreSQL's older bare words."""
    opts: dict = {}
    r.accept("with")
    if r.symbol("("):
        while True:
            key = r.take()
            if key.kind != "word":
                r.error(key)
            tok = r.peek()
            if tok is not None and tok.kind != "symbol":
                r.i += 1
                opts[key.value.lower()] = tok.value
            else:
                opts[key.value.lower()] = "true"
            if r.symbol(")"):
                break
            if not r.symbol(","):
                r.error()
        r.end()
        return opts
    while not r.at_end():
        key = r.take()
        if not key.is_word("csv", "binary", "header", "force", "not", *_LEGACY_VALUED):
            continue        # FORCE QUOTE / FORCE NOT NULL column lists: accepted, not applied
        word = key.value.lower()
        if word in ("csv", "binary"):
            opts["format"] = word
        elif word == "header":
            opts["header"] = "true"
        elif word in _LEGACY_VALUED:
            r.accept("as")
            tok = r.take()
            if tok.kind != "string":
                r.error(tok)
            opts[word] = tok.value
    return opts


def _begins_command(tok) -> bool:
    """Whether a statement whose first token is ``tok`` is a session command."""
    return tok is not None and tok.kind == "word" and tok.value.lower() in READERS


def _copy_source(r: _Reader) -> tuple:
    """(table as written, columns, query, whether the query begins a session command) of
    COPY's subject."""
    if r.symbol("("):
        start, depth = r.peek(), 1
        while depth:
            tok = r.take()
            if tok.kind == "symbol" and tok.value in "()":
                depth += 1 if tok.value == "(" else -1
        if start is tok:
            return None, None, Statement("", r.stmt.offset + tok.start, r.stmt.max_param), False
        return None, None, Statement(r.stmt.text[start.start:tok.start],
                                     r.stmt.offset + start.start, r.stmt.max_param), \
            _begins_command(start)
    first = r.take()
    r.i -= 1
    r.dotted()
    table = r.stmt.text[first.start:r.toks[r.i - 1].end]
    columns = None
    if r.symbol("("):
        columns = [r.name()]
        while r.symbol(","):
            columns.append(r.name())
        if not r.symbol(")"):
            r.error()
    return table, columns, None, False


def _copy(r: _Reader) -> Command:
    table, columns, query, query_is_command = _copy_source(r)
    direction = "in" if r.expect("from", "to") == "from" else "out"
    file = None
    if not r.accept("stdin", "stdout"):
        tok = r.take()
        if tok.kind != "string":
            if tok.is_word("program"):
                raise E.FeatureNotSupported("COPY … PROGRAM is not supported")
            r.error(tok)
        file = tok.value          # the server's file: for roles that may (server_files.py)
    if query is not None and direction == "in":
        raise E.SyntaxError_("COPY (query) can only be used with TO")
    opts = _copy_options(r)
    fmt = opts.get("format", "text").lower()
    if fmt not in ("text", "csv", "binary"):
        raise E.InvalidParameterValue(f'COPY format "{fmt}" not recognized')
    text_only = [o for o in ("delimiter", "null", "header", "quote", "escape") if o in opts]
    if fmt == "binary" and text_only:
        raise E.SyntaxError_(f"cannot specify {text_only[0].upper()} in BINARY mode")
    csv = fmt == "csv"
    return CopyRequest(
        direction, table, columns, query, csv,
        opts.get("header", "false").lower() in ("true", "on", "1", "match"),
        opts.get("delimiter", "," if csv else "\t"),
        opts.get("null", "" if csv else "\\N"),
        opts.get("quote", '"'), opts.get("escape", opts.get("quote", '"')), fmt, file,
        query_is_command)


def _outside(r: _Reader) -> Command:
    """ATTACH, DETACH, INSTALL, LOAD, EXPORT, IMPORT: DuckDB statements that reach files, other
    databases or extensions, which the shared database never does, for any role."""
    word = r.toks[0].value.upper()
    raise E.InsufficientPrivilege(
        f"permission denied to run {word}", position=r.stmt.offset + 1,
        hint="cqgate's database reaches no file, other database or extension; superusers "
             "read files with read_csv(…) and COPY … FROM 'file'.")


# first word -> reader of the rest
READERS = {
    **{word: _outside for word in ("attach", "detach", "install", "load", "export", "import",
                                   "force")},
    "begin": _begin, "start": _start, "commit": _commit, "end": _commit,
    "rollback": _rollback, "abort": _rollback, "savepoint": _savepoint, "release": _release,
    "set": _set, "reset": _reset, "show": _show, "declare": _declare, "fetch": _fetch,
    "move": _fetch, "close": _close, "deallocate": _deallocate, "discard": _discard,
    "listen": _listen, "unlisten": _listen, "copy": _copy,
    **role_syntax.READERS,
}


def read_command(stmt: Statement) -> Command | None:
    """The session command ``stmt`` is, or None when it is for the translator."""
    r = _Reader(stmt)
    first = r.peek()
    if first is None or first.kind != "word" or first.value.lower() not in READERS:
        return None
    r.i = 1
    return READERS[first.value.lower()](r)
