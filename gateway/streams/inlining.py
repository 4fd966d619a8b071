"""Derived streams and named windows read through their own query: a continuous query over
relations whose rows are a function of their streams' archive plans their queries in their
place, as PostgreSQL reads a view, when that makes it a query that can go on from a watermark
(``resume``). It is then primed from the archive, goes on after a crash and resumes from a
progress row as a query over those streams does; its answer at each instant is the same,
since a derived stream's (a named window's) rows valid then are its query's answer then."""
from __future__ import annotations

import dataclasses

from dialect.errors import PlanError
from dialect.planner import plan, query_engine
from executor import plan as P

from gateway.archive import resume
from gateway.archive.priming import unborn
from gateway.pgwire import errors as E
from gateway.streams.registry import SessionCatalog


_WHAT = {"derived": "derived stream", "window": "named window"}


def relations_read(node) -> set:
    """The derived streams and named windows a plan reads as relations of rows."""
    out = {node.name} if isinstance(node, P.WindowRelationScan) else set()
    for c in P.children(node):
        out |= relations_read(c)
    return out


def inlined(ctx, p: P.Plan, replan) -> tuple | None:
    """(the plan ``replan(keys)`` makes with the derived streams and named windows ``p`` reads
    planned in their place, how it resumes), or None when ``p`` reads none, or that plan is
    not a continuous one as ``p`` is; the reason (0A000, 55000) when one of them is not a
    function of the archive or that plan still cannot go on."""
    keys: set = set()
    for name in sorted(relations_read(p.root)):
        keys |= _inlineable(ctx, name)
    if not keys:
        return None
    try:
        q = replan(frozenset(keys))
    except E.PgError:               # (written over the stream, the query is not one)
        return None
    if q.mode != p.mode:
        return None
    return q, resume.resumable(ctx.services.streams, q)


def _inlineable(ctx, name: str) -> set:
    """The keys of derived stream or named window ``name`` and of those its query reads, when
    its rows from any instant on are a function of its streams' archive: its reads that
    start with it read from its birth (``StreamObject.births``), its query can then go on
    from a watermark, and it reads neither now() nor the rows' intervals as columns. Else
    why not (0A000, 55000)."""
    reg = ctx.services.streams
    obj = reg.by_relation(name, kinds=tuple(_WHAT))
    if obj is None:                 # (dropped while the query was planned)
        raise _not(f'relation "{name}"', "it no longer exists", "Declare the query again.",
                   "42P01")
    what = f'{_WHAT[obj.kind]} "{name}"'
    tree = obj.query()
    try:
        if query_engine(tree) == "spark":
            raise _not(what, "it runs on Spark, whose rows are not kept",
                       "Resume a query over a derived stream the back end runs.")
        inner = plan(tree, SessionCatalog(reg, ctx.columns), joins_in_order=True)
        keys: set = set()
        for below in sorted(relations_read(inner.root)):
            keys |= _inlineable(ctx, below)
            under = reg.by_relation(below, kinds=tuple(_WHAT))
            if under.births:
                # running, it reads the rows the one below gives from its own start on,
                # not those from before that still hold (an [UNBOUNDED] row)
                raise _not(what, f'it reads {_WHAT[under.kind]} "{below}" from its own '
                           "start, and that one's rows from before then are not given to it",
                           f"Read the streams of {below} in its query.")
        if keys:
            inner = plan(tree, SessionCatalog(reg, ctx.columns, frozenset(keys)),
                         joins_in_order=True)
    except PlanError as e:          # (what it reads changed since it was made)
        raise _not(what, e.message, e.hint or "") from None
    inner = dataclasses.replace(inner, root=P.born_from(inner.root, obj.births))
    unknown = sorted(unborn(inner.root))
    if unknown:
        raise _not(what, f'where its query began reading "{unknown[0]}" was not kept (it '
                   "started before that was)", "Create it again.")
    if inner.pseudo:
        raise _not(what, "its rows' intervals are columns of it",
                   "Read valid_from and valid_to of the cursor's own rows instead.")
    if [c.name.lower() for c in inner.output] != [c[0].lower() for c in obj.visible_columns]:
        raise _not(what, "its query now gives other columns than it was made with (a stream "
                   "it reads gained one)", "Create it again.")
    try:
        again = resume.resumable(reg, inner)
    except E.PgError as e:
        raise _not(what, e.message.removeprefix(resume.CANNOT), e.hint, e.sqlstate) from None
    if again.horizon_us:
        raise _not(what, "its pattern's matches began when its own query started",
                   "Resume a query with the pattern over the streams themselves.")
    return keys | {obj.key}


def _not(what: str, why: str, hint: str, sqlstate: str = "0A000") -> E.PgError:
    return E.PgError(f"{resume.CANNOT}it reads {what}, whose rows are not a function of the "
                     f"archive: {why}", sqlstate=sqlstate, hint=hint)
