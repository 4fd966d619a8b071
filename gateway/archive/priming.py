"""Priming from the archive: a query whose windows reach into archived streams' past is started
with each stream's history up to its seam (the watermark: what the back end has been given,
late tuples too), so live data after the seam follow it. The clearinghouse keeps stream data
still meanwhile."""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from executor import plan as P

from gateway.clearinghouse.slack import NO_TIME, micros


@dataclass(frozen=True)
class History:
    """An archived stream whose past a new query's windows reach into: the tuples newer than
    ``reach_us`` before the seam (``None``: all of them), or, for a fixed window, from
    ``since_us`` on, or, for a loop, from its first window's start when it starts at the
    seam (``edge``)."""
    stream: str                # relation name, as the back end knows it
    key: str                   # schema.name, as the archive knows it
    ts_column: str
    fragment: str | None
    reach_us: int | None = None
    since_us: int | None = None
    edge: object = None        # seam -> the earliest instant needed (a loop's first window)

    @classmethod
    def of(cls, obj, stream: str, **where) -> "History":
        """Archived stream ``obj`` (a ``StreamObject``) read as ``stream``, from ``where``."""
        return cls(stream, obj.key, obj.timestamp_column, obj.options.get("fragment"), **where)

    def after(self, seam: int | None) -> int | None:
        """The newest event time before the tuples needed (None: all of them)."""
        if self.edge is not None:
            first = self.edge(seam) if seam is not None else None
            return None if first is None else first - 1
        if self.since_us is not None:
            return self.since_us - 1
        if self.reach_us is None or seam is None:
            return None
        return seam - self.reach_us


def started_at(p: P.Plan, seams: dict) -> P.Plan:
    """``p`` with its reads that start with it (not through a window that reaches back, nor
    from a birth) of the streams of ``seams`` ({stream: the instant up to which it takes
    none of their tuples}) reading only what comes after: priming gives every read of a
    stream its history, which those would otherwise take as theirs."""
    births = {s: at + 1 for s, at in seams.items() if at is not None}
    if not births:
        return p
    return dataclasses.replace(p, root=P.born_from(p.root, births))


def unborn(root) -> set:
    """The streams a plan reads by event time through a window that starts with it, not
    from a birth (``P.born_from`` would give them one)."""
    return {s.stream.lower() for s in unprimed_scans(root) if s.by_event_time}


def unprimed_scans(root) -> list:
    """The stream scans a plan reads other than through a window that reaches back or from a
    birth: a window that starts with its query ([UNBOUNDED], ROWS, a session), a pattern's
    events. Priming gives every read of a stream its history, these too (a read from a
    birth leaves out what came before it)."""
    return _scans(root, False)


def _scans(root, primed: bool) -> list:
    warm, every = set(), []

    def visit(node):
        if isinstance(node, P.Window) and node.window.reaches_back:
            scan = P.scan_under(node.input)
            if scan is not None:
                warm.add(id(scan))
        if isinstance(node, P.StreamScan):
            every.append(node)
            if node.born_us is not None:
                warm.add(id(node))
        for c in P.children(node):
            visit(c)
    visit(root)
    return [s for s in every if (id(s) in warm) == primed]


async def start_primed(services, histories: list, start, since: int | None = None):
    """Start a query whose windows reach into archived streams' past: while no stream data
    moves (``services.ingest``), read each stream's history up to its seam and
    ``await start(history, seam)``, which registers the query. ``since``: a query that goes
    on from there (a sink after a restart): its windows are filled as they stood then, and
    its rows from there on go out."""
    return await services.ingest.while_still(
        lambda seam_of: _start(services.archive, services.pool, seam_of, histories, start,
                               since))


async def _start(archive, pool, seam_of, histories: list, start, since: int | None = None):
    """Read each stream's history up to its seam (``seam_of(stream)``: its watermark, or None)
    and start; the seam passed is the newest of the streams' (``NO_TIME`` when no stream has
    history), or ``since`` when given."""
    loop = asyncio.get_running_loop()
    history, seams = {}, []
    for stream in {h.stream.lower() for h in histories}:
        mine = [h for h in histories if h.stream.lower() == stream]
        seam = seam_of(stream)
        reach_from = seam if since is None or seam is None else min(seam, since)
        afters = [h.after(reach_from) for h in mine]       # the widest reach of them all
        after = None if None in afters else min(afters)
        h = mine[0]
        table = await loop.run_in_executor(pool, archive.read, h.key, h.ts_column, after,
                                           seam, h.fragment)
        if table is not None:
            history[stream] = table
            top = int(micros(table.column(h.ts_column).combine_chunks())[-1])
            seams.append(seam if seam is not None else top)
        elif seam is not None:      # nothing archived there yet: it still starts at the seam
            seams.append(seam)
    if since is not None:
        return await start(history, since)
    if not seams:                   # no stream has begun: it starts with live data
        return await start(None, NO_TIME)
    return await start(history, max(seams))
