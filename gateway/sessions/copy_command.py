"""COPY … FROM STDIN and COPY … TO STDOUT read into a ``CopyRequest`` that the connection carries
out (it owns the CopyData messages); file and program targets are refused."""
from __future__ import annotations

import re
from dataclasses import dataclass

from dialect.names import fold

from gateway.pgwire import errors as E
from gateway.sessions.command_text import NAME, statement_body


@dataclass
class CopyRequest:
    """A COPY the connection carries out (it owns the CopyData stream)."""
    direction: str            # "in" | "out"
    table: str | None         # target/source table (schema-qualified text as written)
    columns: list | None
    query: str | None         # COPY (query) TO STDOUT
    csv: bool
    header: bool
    delimiter: str
    null: str
    quote: str
    escape: str


_COPY = re.compile(
    rf"^copy\s+(?:(?P<table>{NAME}(?:\.{NAME})?)\s*(?:\((?P<cols>[^)]*)\))?|\((?P<query>.*)\))"
    rf"\s+(?P<dir>from|to)\s+(?P<where>stdin|stdout)\s*(?P<opts>.*)$", re.I | re.S)


def _copy_options(text: str) -> dict:
    text = text.strip()
    if text.lower().startswith("with"):
        text = text[4:].strip()
    opts: dict = {}
    if text.startswith("(") and text.endswith(")"):
        for part in re.findall(r"(\w+)(?:\s+('(?:[^']|'')*'|\w+))?", text[1:-1]):
            key, val = part[0].lower(), part[1]
            opts[key] = val.strip("'").replace("''", "'") if val else "true"
        return opts
    for m in re.finditer(r"(csv|header|binary|delimiter|null|quote|escape)"
                         r"(?:\s+(?:as\s+)?('(?:[^']|'')*'))?", text, re.I):
        key, val = m.group(1).lower(), m.group(2)
        if key in ("csv", "binary"):
            opts["format"] = key
        else:
            opts[key] = val.strip("'").replace("''", "'") if val else "true"
    return opts


async def copy_statement(session, p, params):
    m = _COPY.match(statement_body(p))
    if not m:
        raise E.FeatureNotSupported(
            "COPY supports only FROM STDIN and TO STDOUT",
            hint="Use psql's \\copy to read or write files on the client.")
    opts = _copy_options(m.group("opts"))
    fmt = opts.get("format", "text").lower()
    if fmt == "binary":
        raise E.FeatureNotSupported("COPY BINARY is not supported; use text or CSV")
    csv = fmt == "csv"
    direction = "in" if m.group("dir").lower() == "from" else "out"
    if m.group("query") and direction == "in":
        raise E.SyntaxError_("COPY (query) can only be used with TO")
    cols = [fold(c) for c in m.group("cols").split(",")] if m.group("cols") else None
    return CopyRequest(
        direction, m.group("table"), cols, m.group("query"), csv,
        opts.get("header", "false").lower() in ("true", "on", "1", "match"),
        opts.get("delimiter", "," if csv else "\t"),
        opts.get("null", "" if csv else "\\N"),
        opts.get("quote", '"'), opts.get("escape", opts.get("quote", '"')))
