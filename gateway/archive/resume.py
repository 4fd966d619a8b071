"""Going on from a progress watermark: which continuous plans can be resumed exactly (their rows
from an instant on are a function of the archive, so a query started anew there gives the rows
the first one would have given), and the archive reads that resume them (``needs``/``histories``).

A plan resumes when every stream it reads is archived and every piece of state it keeps is
bounded in time: windows that reach back (RANGE, SLIDE, fixed, Flink's tables) are filled from
the archive as a new query's are; a pattern reads back its WITHIN; [NOW] and [UNBOUNDED] tuples
go on as they come, under operators that keep nothing (σ, μ, ∪). Everything else (a count,
session or loop window, a LIMIT, a table's contents, arrival order, a named window, a derived
stream whose rows are not a function of the archive) is refused with the reason, at plan time
(a derived stream whose rows are is read through its query: ``streams.inlining``; there, the
reads that start with its query read from its birth, ``born_us``, and whatever operators keep
over them is rebuilt by reading from there again).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from executor import checkpoints
from executor import plan as P

from gateway.archive.priming import History, start_primed, started_at
from gateway.link.resumption import Resumption
from gateway.pgwire import errors as E

_PASS = (P.Filter, P.Map, P.Union_)                       # keep nothing
# an answer at each instant from its inputs' tuples valid then (Σ: each instant's snapshot)
_STATEFUL = (P.Aggregate, P.Distinct, P.Join, P.TopN, P.Difference, P.Intersection,
             P.SnapshotQuery)
# a tuple's interval is its own; those that may hold long ([UNBOUNDED], a stream's own end
# column) cannot be under an operator that keeps them
_AS_THEY_COME = (P.NowWindow, P.UnboundedWindow, P.IntervalWindow)
_LONG = (P.UnboundedWindow, P.IntervalWindow)
# windows whose state depends on when their query started, whatever they reach back to: a
# loop's iterations begin at its start (ST), a table's row versions at its first copy
_FROM_START = (P.LoopWindow, P.VersionWindow, P.RowsWindow, P.SessionWindow)


@dataclass(frozen=True)
class Need:
    """One stream read: the stream, its window (None: a pattern's events, or tuples as they
    come) and how much earlier than the resume point the operators above it look (a
    pattern's WITHIN)."""
    scan: P.StreamScan
    window: object = None
    before_us: int = 0

    def since(self, at: int | None, started: dict | None) -> int | None:
        """The earliest event time needed to go on from ``at`` (None: to start again as the
        query first did, unprimed: every tuple it saw); ``started``: {stream: the instant up
        to which the query being resumed saw none of its tuples} for tuples read as they
        come (a restart after a crash knows it; a client's resume does not need it, since
        progress is only reported past it). A window that reaches back was filled from the
        archive when the query started, so it is filled so again."""
        if self.scan.born_us is not None:   # (every tuple since its derived stream began)
            return self.scan.born_us
        started = None if started is None else started.get(self.scan.stream.lower())
        if at is None:      # (a window that reaches back saw every tuple: none came before)
            reads_all = started is None or (self.window is not None and
                                            self.window.reaches_back)
            return None if reads_all else started + 1
        at -= self.before_us
        if self.window is not None and self.window.reaches_back:
            reach = self.window.reach(at)
            return at if reach is None else reach
        return at if started is None else max(at, started + 1)


@dataclass(frozen=True)
class Resumable:
    needs: tuple                  # tuple[Need]

    @property
    def horizon_us(self) -> int:
        """The longest look back of an operator above the windows (a pattern's WITHIN)."""
        return max((n.before_us for n in self.needs), default=0)

    def histories(self, streams, at: int | None, started: dict | None = None) -> list:
        """The archive reads (``History``) that resume the plan at ``at``."""
        out = []
        for need in self.needs:
            _archived(streams, need.scan.stream)        # (it may have been dropped since)
            obj = streams.by_relation(need.scan.stream, kinds=("stream",))
            out.append(History.of(obj, need.scan.stream, since_us=need.since(at, started)))
        return out


CANNOT = "this query cannot be resumed: "


def refused(why: str, hint: str) -> E.PgError:
    return E.FeatureNotSupported(CANNOT + why, hint=hint)


_WINDOW_HINT = "Give the stream a RANGE window (its state is then rebuilt from the archive)."


def resumable(streams, p: P.Plan) -> Resumable:
    """The plan's archive needs when resumed, or the reason (0A000, or 55000 for a stream not
    archived) it cannot be."""
    needs: list = []

    def walk(node, before: int) -> bool:
        """Whether ``node``'s rows hold forever ([UNBOUNDED]: its state would be every tuple
        since the query began)."""
        if _born(node):
            # its tuples from where a derived stream's query began: whatever it keeps, it is
            # rebuilt by reading them all again
            for scan in _scans(node):
                _by_event_time(scan)
                _archived(streams, scan.stream)
                needs.append(Need(scan))
            return False
        if isinstance(node, P.StreamScan):
            _by_event_time(node)
            _archived(streams, node.stream)
            needs.append(Need(node, None, before))
            return False
        if isinstance(node, P.Window):
            kind = node.window
            if isinstance(kind, _FROM_START):
                raise refused(f"its {type(kind).__name__} keeps tuples from when it started",
                              _WINDOW_HINT)
            if kind.reaches_back and P.scan_under(node.input) is not None:
                # filled from the archive when a query starts (streams.queries.archive_reach)
                walk(node.input, before)
                needs[-1] = Need(needs[-1].scan, kind, before)
                return False
            if isinstance(kind, _AS_THEY_COME):
                return walk(node.input, before) or isinstance(kind, _LONG)
            raise refused(f"its {type(kind).__name__} keeps tuples from when it started",
                          _WINDOW_HINT)
        if isinstance(node, P.Pattern):
            if node.within_us is None:
                raise refused("its pattern has no WITHIN, so a match may begin anywhere in "
                              "the past", "Bound the pattern: … WITHIN '10 seconds'.")
            if node.skip != "all" or any(m.func == "match_number" for m in node.measures):
                raise refused("where its matches begin (AFTER MATCH SKIP) or how they are "
                              "numbered depends on every match since it started",
                              "Resume a pattern that skips to the next row and numbers no "
                              "match.")
            return _stateful(node, [walk(c, before + node.within_us) for c in node.inputs])
        if isinstance(node, _PASS):
            return any([walk(c, before) for c in P.children(node)])
        if isinstance(node, P.WindowRelationScan):
            raise refused(*_RELATION_REFUSALS[node.kind](node.name))
        if isinstance(node, P.SnapshotQuery) and node.tables:
            raise refused(f"a table's past contents are not kept ({P.explain_label(node)})",
                          "Resume a query over archived streams only.")
        if isinstance(node, _STATEFUL):
            return _stateful(node, [walk(c, before) for c in P.children(node)])
        raise refused(f"it reads {P.explain_label(node)}",
                      "Resume a query over archived streams; tables, LIMIT and StreaQueL "
                      "loops cannot go on from a watermark yet.")

    walk(p.root, 0)
    if p.reads_now:
        raise refused("it reads now(), the instant it is planned",
                      "Write the instant as a literal.")
    _parted_alike(p.root)
    return Resumable(tuple(needs))


# operators whose rows still open at a BOUNDARY are parted there (the rest comes later)
_PARTING = (P.Aggregate, P.Distinct, P.TopN, P.Difference, P.Intersection, P.SnapshotQuery)


def _parted_alike(root) -> None:
    """Refused: an operator that parts its open rows at its input's BOUNDARYs, over only some
    of the streams the query reads. A progress row comes at the slowest stream's watermark;
    such an operator's rows were parted where its own streams' BOUNDARYs fell, which may be
    past it, while a query resumed (or restarted) there parts them at that instant, so it
    would give again part of a row sent before it."""
    every = {s.stream.lower() for s in _scans(root)}
    if len(every) < 2:
        return

    def visit(node):
        parting = isinstance(node, _PARTING) or (isinstance(node, P.Window) and isinstance(
            node.window, (P.RowsWindow, P.SessionWindow)))
        own = {s.stream.lower() for s in _scans(node)}
        if parting and own < every:
            raise refused(
                f"{P.explain_label(node)} reads {', '.join(sorted(own))} alone while the "
                f"query also reads {', '.join(sorted(every - own))}: it parts its rows where "
                "its own streams' watermarks fall, not where the query's progress rows do",
                "Resume a query whose aggregates read every stream it reads (or read each "
                "stream in a cursor of its own).")
        for c in P.children(node):
            visit(c)
    visit(root)


# (a cursor reads a derived stream whose rows are a function of the archive through its
# query, streams.inlining, which says why another is not)
_RELATION_REFUSALS = {
    "derived": lambda name: (
        f'it reads derived stream "{name}"', "Resume a query over archived streams."),
    "window": lambda name: (
        f'it reads named window "{name}"', "Resume the named window's query itself, or "
        "make it a derived stream (CREATE STREAM … AS)."),
}


def _by_event_time(scan: P.StreamScan) -> None:
    if not scan.by_event_time:
        raise refused(f'it reads "{scan.stream}" by arrival, not by event time',
                      "Resume a query that reads streams by their event time.")


def _born(node) -> bool:
    """Whether every stream ``node`` reads, it reads from a named window's or derived
    stream's birth (``P.born_from``), and what it keeps is rebuilt by reading them again:
    a table's past contents and a named window's rows are not kept, and a loop's or a
    table version window's state begins at its query's start, not at a birth."""
    def lost(n) -> bool:
        return isinstance(n, (P.TableScan, P.WindowRelationScan)) or \
            (isinstance(n, P.SnapshotQuery) and bool(n.tables)) or \
            (isinstance(n, P.Window) and isinstance(n.window, (P.LoopWindow, P.VersionWindow)))
    scans = _scans(node)
    return bool(scans) and all(s.born_us is not None for s in scans) and \
        not P.contains(node, lost)


def _scans(node) -> list:
    found = [node] if isinstance(node, P.StreamScan) else []
    return found + [s for c in P.children(node) for s in _scans(c)]


def _stateful(node, forever: list) -> bool:
    if any(forever):
        raise refused(f"{P.explain_label(node)} over [UNBOUNDED] (or a stream's own end "
                      "column) keeps every tuple since the query began", _WINDOW_HINT)
    return False


def _archived(streams, name: str) -> None:
    obj = streams.by_relation(name, kinds=("stream",))
    if obj is None or not obj.archived:
        raise E.PgError(f'stream "{name}" is not archived, so its past cannot be read again',
                        sqlstate="55000",
                        hint="Declare it TYPE ARCHIVED (CREATE STREAM … TYPE ARCHIVED); a "
                             "query over it can then be resumed.")


def with_intervals(p: P.Plan) -> P.Plan | None:
    """The plan with its rows' valid_from and valid_to as two more columns at the end (the
    gateway needs them to resume a query after a crash, and drops them before the client
    sees the rows); None when a column of the answer already has one of those names but is
    not the interval."""
    names = {c.name for c in p.output}
    if any(n in names and n not in p.pseudo for n in ("valid_from", "valid_to")):
        return None
    extra = (P.Column("valid_from", "TIMESTAMP"), P.Column("valid_to", "TIMESTAMP"))
    return dataclasses.replace(p, output=p.output + extra, pseudo=tuple(dict.fromkeys(
        p.pseudo + ("valid_from", "valid_to"))))


def from_checkpoint(folder: str | None, histories: list) -> tuple:
    """(the newest checkpoint in ``folder``, the archive reads from where it stands on), or
    (None, ``histories``) when there is none, or one of the streams is not in it."""
    saved = checkpoints.latest(folder) if folder is not None else None
    if saved is None:
        return None, histories
    at = checkpoints.positions(saved)
    if any(h.stream.lower() not in at for h in histories):
        return None, histories
    return saved, [dataclasses.replace(h, since_us=at[h.stream.lower()], reach_us=None)
                   for h in histories]


def seams(services, again: Resumable) -> dict:
    """Each stream's watermark now (read while stream data stands still, as its history is):
    a resumed query is told it at once rather than waiting for the stream's next."""
    names = {n.scan.stream.lower() for n in again.needs}
    return {n: s for n in names if (s := services.ingest.seam(n)) is not None}


def resumed(services, planned) -> tuple:
    """(the plan to run, its ``Resumption``) for a continuous query ``planned`` (a
    ``streams.queries.Planned``) that asks for progress rows or can go on after a crash: a
    query that can carries its rows' intervals in two more columns, and its restart reads
    the archive from its last watermark."""
    p, how, again = planned.plan, planned.delivery, planned.resumable
    width = len(p.output)
    hidden = with_intervals(p) if again is not None or how.progress else None
    if how.progress and hidden is None:
        raise E.FeatureNotSupported("progress rows need the rows' intervals, and a column of "
                                    "this query is named valid_from or valid_to",
                                    hint="Rename that column (… AS vf).")
    pseudo = {n: i for i, c in enumerate(p.output) for n in ("valid_from", "valid_to")
              if c.name == n and n in p.pseudo}
    if hidden is None:
        return p, Resumption(width, progress=how.progress)
    if again is None:           # progress rows, but no restart: it cannot go on
        return hidden, Resumption(width, progress=True, hidden=True, pseudo=pseudo)

    async def restart(live, since: int | None, started: dict | None, generation: int):
        if since is None and how.resume_from is not None:
            since = how.resume_from         # (the rows before it were sent before)
        if since is None:               # its rows passed no watermark: it starts as it did
            at = live.resumption.seam
            return await start_primed(
                services, again.histories(services.streams, at, started),
                lambda history, seam: services.backend.reopen(
                    live, started_at(hidden, started or {}), {}, history, at,
                    seams(services, again), generation, primed=True), at)
        histories = again.histories(services.streams, since, started)
        saved, histories = from_checkpoint(services.backend.checkpoint_dir(live.qid),
                                           histories)
        if saved is not None:
            live.resumption.from_checkpoint()
        return await start_primed(
            services, histories,
            lambda history, seam: services.backend.reopen(live, hidden, {}, history, since,
                                                          seams(services, again), generation,
                                                          restore=saved),
            since)

    r = Resumption(width, progress=how.progress, restart=restart, hidden=True, pseudo=pseudo,
                   horizon_us=again.horizon_us)
    if how.resume_from is not None:       # it saw every tuple it needs from there on
        r.started = {n.scan.stream.lower(): how.resume_from - again.horizon_us - 1
                     for n in again.needs}
    return hidden, r
