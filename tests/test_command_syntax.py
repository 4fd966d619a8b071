"""The session commands' reader (gateway/syntax/command_syntax.py): each spelling PostgreSQL
accepts reads into the typed command the session runs, statements for the translator read as
None, and malformed commands fail with 42601 at the offending token, before anything runs."""
from __future__ import annotations

import pytest

from gateway.pgwire import errors as E
from gateway.syntax import command_syntax as C
from gateway.syntax.lexer import split, tokens


def read(sql: str):
    return C.read_command(split(sql)[0])


@pytest.mark.parametrize("sql, command", [
    ("BEGIN", C.Begin()),
    ("start transaction isolation level serializable", C.Begin()),
    ("-- why\n/* nested /* comment */ */ begin;", C.Begin()),
    ("COMMIT WORK", C.Commit()),
    ("end", C.Commit()),
    ("commit and no chain", C.Commit()),
    ("abort", C.Rollback()),
    ("ROLLBACK WORK TO b", C.RollbackTo("b")),
    ('rollback to savepoint "B"', C.RollbackTo("B")),
    ('SAVEPOINT "Mixed"', C.Savepoint("Mixed")),
    ("release savepoint A", C.Release("a")),
    ("set cq.mode = snapshot", C.Set("cq.mode", "snapshot")),
    ("SET LOCAL statement_timeout TO '1s'", C.Set("statement_timeout", "1s", local=True)),
    ("SET SESSION extra_float_digits = -1", C.Set("extra_float_digits", "-1")),
    ("SET TIME ZONE 'Europe/Paris'", C.Set("TimeZone", "Europe/Paris")),
    ("SET search_path TO a, 'b c'", C.Set("search_path", "a, b c")),
    ("SET x TO DEFAULT", C.Set("x", None)),
    ("SET application_name = 'it''s'", C.Set("application_name", "it's")),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
     C.Set(None, None)),
    ("SET TRANSACTION READ ONLY", C.Set(None, None)),
    ("reset all", C.Reset(None)),
    ("RESET TIME ZONE", C.Reset("TimeZone")),
    ("SHOW transaction   isolation level", C.Show("transaction_isolation")),
    ("show all", C.Show(None)),
    ("fetch c", C.Fetch(False, "", "", "c", None)),
    ("fetch next", C.Fetch(False, "", "", "next", None)),   # a cursor named next
    ("FETCH ALL IN c", C.Fetch(False, "all", "", "c", None)),
    ("fetch forward all from c", C.Fetch(False, "forward", "all", "c", None)),
    ("fetch backward 2 c", C.Fetch(False, "backward", "2", "c", None)),
    ("fetch absolute -1 from c", C.Fetch(False, "absolute", "-1", "c", None)),
    ("FETCH 10 FROM c WITH (timeout = '6s')", C.Fetch(False, "", "10", "c", "6s")),
    ('MOVE 3 IN "C"', C.Fetch(True, "", "3", "C", None)),
    ("close all", C.Close(None)),
    ("close C", C.Close("c")),
    ("deallocate prepare s1", C.Deallocate("s1")),
    ("DEALLOCATE ALL", C.Deallocate(None)),
    ("discard all", C.Discard("all")),
    ("unlisten *", C.Listen("UNLISTEN")),
    ("SELECT 1", None),
    ("commit prepared 'x'", None),
    ("INSERT INTO t VALUES ('begin')", None),
])
def test_reads_each_spelling(sql, command):
    assert read(sql) == command


def test_declare_keeps_the_query_where_the_client_wrote_it():
    sql = "SELECT 1; DECLARE c NO SCROLL CURSOR WITH HOLD FOR SELECT k FROM s"
    cmd = C.read_command(split(sql)[1])
    assert (cmd.name, cmd.hold) == ("c", True)
    assert cmd.query.text == "SELECT k FROM s"
    assert sql[cmd.query.offset:] == "SELECT k FROM s"
    assert read("declare c cursor for").query is None
    # whether the query is a session command is known from the DECLARE's own tokens
    assert not cmd.query_is_command
    assert read("DECLARE c CURSOR FOR SHOW search_path").query_is_command
    assert read("DECLARE c CURSOR FOR fetch_rows()").query_is_command is False


def test_copy_forms():
    assert read('copy s."T" (a, "B") from stdin with (format csv, header true, '
                "delimiter ';')") == C.CopyRequest(
        "in", 's."T"', ["a", "B"], None, True, True, ";", "", '"', '"', "csv")
    sql = "COPY (SELECT a FROM t WHERE (x) = 1) TO STDOUT WITH CSV HEADER"
    out = read(sql)
    assert (out.direction, out.query.text, out.csv, out.header) == \
        ("out", "SELECT a FROM t WHERE (x) = 1", True, True)
    assert sql[out.query.offset:].startswith(out.query.text)     # placed where it was written
    assert not out.query_is_command and read("COPY (SHOW x) TO STDOUT").query_is_command
    legacy = read("copy t to stdout delimiter as '|' null as ''")
    assert (legacy.delimiter, legacy.null, legacy.csv) == ("|", "", False)
    assert read("copy t to stdout (format binary)").format == "binary"
    # a server file: read here, refused or allowed by the role when it runs
    assert (read("copy t from '/etc/passwd'").file, read("copy t to 'out.csv'").file) == (
        "/etc/passwd", "out.csv")


@pytest.mark.parametrize("sql, error, position", [
    ("set x =", E.SyntaxError_, 8),
    ("SELECT 1; set x = 1 2 ,", E.SyntaxError_, 24),
    ("FETCH 1 FROM c WITH (wait = 1)", E.SyntaxError_, 22),
    ("declare c cursor without for select 1", E.SyntaxError_, 26),
    ("savepoint", E.SyntaxError_, 10),
    ("discard everything", E.SyntaxError_, 9),
    ("copy t from program 'cat /etc/passwd'", E.FeatureNotSupported, None),
    ("copy t from passwd", E.SyntaxError_, 13),
    ("copy (select 1) from stdin", E.SyntaxError_, None),
    ("copy t to stdout (format json)", E.InvalidParameterValue, None),
])
def test_malformed_commands_fail_before_running(sql, error, position):
    stmt = split(sql)[-1]
    with pytest.raises(error) as info:
        C.read_command(stmt)
    if position is not None:
        assert info.value.position == position


def test_tokens_undo_quoting_and_skip_comments():
    toks = tokens("""x /* a /* b */ */ 'it''s' E'a\\nb' "Q""x" $$d$$ -- end""")
    assert [(t.kind, t.value) for t in toks] == [
        ("word", "x"), ("string", "it's"), ("string", "a\nb"), ("name", 'Q"x'),
        ("string", "d")]
