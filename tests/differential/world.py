"""What a differential run queries: three small streams and a table, NULL-heavy values in small
domains (so joins and groups collide), seeded random tuples in event-time order with sub-second
times and ties, the batches they are inserted in, and the validity interval each tuple gets
under a window, computed here from DESIGN §5's definitions, independently of the executor.

Times are µs since the Unix epoch; event times lie in 2031, far from the
wall clock, so only the data and ``ALTER STREAM … ADVANCE TO`` move a stream's watermark."""
from __future__ import annotations

import datetime as dt
import random
import textwrap
from dataclasses import dataclass, field

S = 1_000_000
INF = 1 << 62                                  # valid forever
EPOCH = dt.datetime(2031, 1, 1)
T0 = int((EPOCH - dt.datetime(1970, 1, 1)).total_seconds()) * S   # every query starts here
TAIL = 8 * S                                   # compared past the last tuple for this long


@dataclass(frozen=True)
class Relation:
    """A stream or the table: its columns as (name, SQL type, kind) with kind one of int,
    text, double; ``own``: a stream whose tuples carry their own [ts, te); ``time``: the type
    of its event time, whose precision its tuples' times keep (``tick`` µs)."""
    name: str
    columns: tuple
    kind: str = "stream"
    own: bool = False
    time: str = "TIMESTAMP"
    tick: int = 1

    def create(self, real: str) -> str:
        cols = [f"{n} {t}" for n, t, _ in self.columns]
        if self.kind == "table":
            return f"CREATE TABLE {real} ({', '.join(cols)})"
        cols.append(f"t {self.time} TIMESTAMPCOLUMN")
        if self.own:
            cols.append("te TIMESTAMP ENDTIMESTAMPCOLUMN")
        # archived: a query over it can be resumed from a progress watermark (runner.py)
        return f"CREATE STREAM {real} ({', '.join(cols)}) TYPE ARCHIVED"


RELATIONS = {
    "s1": Relation("s1", (("k", "INT", "int"), ("v", "INT", "int"), ("s", "TEXT", "text"))),
    "s2": Relation("s2", (("k", "INT", "int"), ("v", "INT", "int"), ("d", "DOUBLE", "double")),
                   time="TIMESTAMP(3)", tick=1000),       # event times in milliseconds
    "s3": Relation("s3", (("k", "INT", "int"), ("v", "INT", "int")), own=True),
    "tb": Relation("tb", (("k", "INT", "int"), ("name", "TEXT", "text"), ("z", "INT", "int")),
                   kind="table"),
}
STREAMS = ("s1", "s2", "s3")
# a SQL function of the round's own, as cqgate is told it and as the oracle defines it
FUNCTION = "CREATE FUNCTION {name}(x INT) RETURNS INT AS 'SELECT x * 2 - 1' LANGUAGE SQL"
ORACLE_FUNCTION = "CREATE MACRO fn(x) AS CAST(CAST(x AS INT) * 2 - 1 AS INT)"
# a Python function (LANGUAGE python), called per row with None for NULL: the oracle runs the
# same body, defined in its DuckDB as a Python function too
PYTHON_BODY = """
if s is None:
    return None
return s * ((n or 0) % 3) + ('!' if n is None else '')
"""
PYTHON_FUNCTION = ("CREATE FUNCTION {name}(s TEXT, n BIGINT) RETURNS TEXT LANGUAGE python "
                   "IMMUTABLE AS $$" + PYTHON_BODY + "$$")

_ORACLE_SCOPE: dict = {}
exec("def python_function(s, n):\n" + textwrap.indent(PYTHON_BODY.strip(), "    "),  # noqa: S102
     _ORACLE_SCOPE)
python_function = _ORACLE_SCOPE["python_function"]

# the domains: small, with NULLs, and doubles that add up exactly in any order
DOMAINS = {
    "k": [0, 0, 1, 1, 2, None],
    "v": [-2, -1, 0, 1, 2, 3, None],
    "s": ["a", "b", "ab", None],
    "d": [-1.5, 0.25, 2.0, None],
    "name": ["x", "y", None],
    "z": [-1, 0, 1, 2, None],
}
STEPS = [0, 0, 1, 250_000, 500_000, S, S, 3 * S // 2, 2 * S, 3 * S]   # µs between tuples
LENGTHS = [1, 500_000, S, 2 * S, 4 * S]                             # an own interval's


def timestamp(us: int) -> str:
    """µs since the Unix epoch as a SQL timestamp literal."""
    t = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
    return f"TIMESTAMP '{t.isoformat(sep=' ')}'"


def sql_value(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


@dataclass
class Data:
    """The tuples of each stream (dicts of column values plus ``ts``, and ``te`` for an own
    interval), the table's rows, and the insertion order: [(stream, [tuple index])]."""
    tuples: dict
    table: list
    batches: list
    end: int = 0                  # µs: the watermark every stream is advanced to at the end

    @property
    def last(self) -> int:
        """The latest event time of any tuple (T0 when there is none)."""
        return max([t["ts"] for rows in self.tuples.values() for t in rows], default=T0)

    def inserts(self, names: dict) -> list:
        """The INSERT statements, in order, for streams named ``names[logical]``."""
        out = []
        for stream, idx in self.batches:
            rel = RELATIONS[stream]
            rows = []
            for i in idx:
                t = self.tuples[stream][i]
                vals = [sql_value(t[c]) for c, _, _ in rel.columns] + [timestamp(t["ts"])]
                if rel.own:
                    vals.append(timestamp(t["te"]))
                rows.append(f"({', '.join(vals)})")
            out.append(f"INSERT INTO {names[stream]} VALUES {', '.join(rows)}")
        return out

    def table_insert(self, real: str) -> str | None:
        rel = RELATIONS["tb"]
        if not self.table:
            return None
        rows = ", ".join("(" + ", ".join(sql_value(r[c]) for c, _, _ in rel.columns) + ")"
                         for r in self.table)
        return f"INSERT INTO {real} VALUES {rows}"

    def without(self, stream: str, drop: set) -> "Data":
        """The same data without the tuples ``drop`` of ``stream`` (shrinking)."""
        keep = [i for i in range(len(self.tuples[stream])) if i not in drop]
        renumber = {old: new for new, old in enumerate(keep)}
        tuples = dict(self.tuples)
        tuples[stream] = [self.tuples[stream][i] for i in keep]
        batches = []
        for s, idx in self.batches:
            idx = [renumber[i] for i in idx if s != stream or i in renumber] if s == stream \
                else idx
            if idx:
                batches.append((s, idx))
        return Data(tuples, self.table, batches, self.end)

    def without_rows(self, drop: set) -> "Data":
        return Data(self.tuples, [r for i, r in enumerate(self.table) if i not in drop],
                    self.batches, self.end)

    def describe(self) -> str:
        lines = []
        for s in STREAMS:
            for t in self.tuples[s]:
                vals = ", ".join(f"{c}={t[c]!r}" for c, _, _ in RELATIONS[s].columns)
                span = f"{(t['ts'] - T0) / S:g}s" + (f"..{(t['te'] - T0) / S:g}s" if "te" in t
                                                     else "")
                lines.append(f"  {s} @{span}: {vals}")
        for r in self.table:
            lines.append("  tb: " + ", ".join(f"{c}={r[c]!r}" for c, _, _ in
                                              RELATIONS["tb"].columns))
        lines.append("  batches: " + "; ".join(f"{s}{idx}" for s, idx in self.batches))
        return "\n".join(lines)


def random_data(rng: random.Random, max_tuples: int = 14) -> Data:
    tuples = {}
    for name in STREAMS:
        rel, ts, rows = RELATIONS[name], T0, []
        for _ in range(rng.randint(0, max_tuples)):
            step = rng.choice(STEPS)
            ts += step - step % rel.tick
            row = {c: rng.choice(DOMAINS[c]) for c, _, _ in rel.columns}
            row["ts"] = ts
            if rel.own:
                row["te"] = ts + rng.choice(LENGTHS)
            rows.append(row)
        tuples[name] = rows
    table = [{c: rng.choice(DOMAINS[c]) for c, _, _ in RELATIONS["tb"].columns}
             for _ in range(rng.randint(0, 5))]
    # each stream's tuples in 1-4 runs, the runs of all streams interleaved at random
    runs = []
    for name in STREAMS:
        n = len(tuples[name])
        cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 3)))) if n > 1 else []
        bounds = [0] + cuts + [n]
        runs.append([(name, list(range(a, b))) for a, b in zip(bounds, bounds[1:]) if b > a])
    batches = []
    while any(runs):
        pick = rng.choice([r for r in runs if r])
        batches.append(pick.pop(0))
    last = max([t.get("te", t["ts"]) for rows in tuples.values() for t in rows], default=T0)
    end = (last + TAIL + S - 1) // S * S
    return Data(tuples, table, batches, end)


# ---------------------------------------------------------------------- windows
@dataclass(frozen=True)
class Window:
    """A window as written after a stream: ``kind`` one of none, range, now, unbounded,
    rows, slide, between, session (its gap is ``size``), or one of Flink's window table
    functions (``TABLES``: tumble, hop, cumulate, whose step is ``slide``, and tvf_session);
    sizes in µs; ``partition``: column names; ``where``: a predicate over the stream's columns
    (SQL both dialects read); ``start``: a slide's START AT."""
    kind: str
    size: int = 0
    slide: int = 0
    rows: int = 0
    partition: tuple = ()
    where: str | None = None
    start: int | None = None
    low: int = 0
    high: int = 0
    spelling: int = 0             # which of the equivalent spellings to write

    def cql(self) -> str:
        return _CQL[self.kind](self)


def _size(us: int, spelling: int) -> str:
    if us % S == 0:
        n = us // S
        return [f"RANGE '{n} seconds'", f"RANGE {n}", f"'{n} seconds'",
                f"RANGE INTERVAL '{n} seconds'"][spelling % 4]
    return f"RANGE '{us // 1000} milliseconds'"


def _span(us: int) -> str:
    return f"'{us // 1000} milliseconds'" if us % S else f"'{us // S} seconds'"


_CQL = {
    "none": lambda w: "",
    "range": lambda w: f"[{_size(w.size, w.spelling)}]",
    "now": lambda w: "[NOW]",
    "unbounded": lambda w: ["[UNBOUNDED]", "[RANGE UNBOUNDED]"][w.spelling % 2],
    "rows": lambda w: "[" + (f"PARTITION BY {', '.join(w.partition)} " if w.partition else "")
    + f"ROWS {w.rows}" + (f" WHERE {w.where}" if w.where else "") + "]",
    "slide": lambda w: (f"[RANGE BY {_span(w.size)} SLIDE BY {_span(w.slide)} START AT "
                        f"{timestamp(w.start)[10:]}]" if w.start is not None else
                        f"[RANGE {_span(w.size)} SLIDE {_span(w.slide)}]"),
    "between": lambda w: f"[BETWEEN {timestamp(w.low)[10:]} AND {timestamp(w.high)[10:]}]",
    "session": lambda w: "[" + (f"PARTITION BY {', '.join(w.partition)} " if w.partition
                                else "") + f"SESSION {_span(w.size)}]",
}


# Flink's window table functions: TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), …)) in FROM, each
# tuple once per window [start, end) with the columns window_start, window_end (window_time)
TABLES = ("tumble", "hop", "cumulate", "tvf_session")


def _interval(us: int) -> str:
    return f"INTERVAL '{us // S}' SECOND" if us % S == 0 else \
        f"INTERVAL '{us // 1000}' MILLISECOND"


def window_table(w: Window, name: str, alias: str) -> str:
    """The FROM item reading stream ``name`` through window table function ``w``."""
    if w.kind == "tvf_session":
        part = f" PARTITION BY {', '.join(w.partition)}" if w.partition else ""
        return (f"TABLE(SESSION(TABLE {name}{part}, DESCRIPTOR(t), {_interval(w.size)})) "
                f"AS {alias}")
    sizes = [w.size] if w.kind == "tumble" else [w.slide, w.size]
    return (f"TABLE({w.kind.upper()}(TABLE {name}, DESCRIPTOR(t), "
            f"{', '.join(map(_interval, sizes))})) AS {alias}")


def window_columns(w: Window | None) -> tuple:
    """The columns a window table function adds."""
    if w is None or w.kind not in TABLES:
        return ()
    bounds = ("window_start", "window_end")
    return bounds if w.kind == "tvf_session" else bounds + ("window_time",)


def copies(w: Window, rows: list) -> list:
    """Under a window table function, (tuple index, (vf, vt), its window's columns) for each
    window holding each tuple: windows [start, end) on a grid from the epoch (a session's
    [first, last + gap)), each copy valid from end - 1 µs for one step (a session's from its
    end for one gap), Flink's windows as DESIGN §5 holds an answer."""
    if w.kind == "tvf_session":
        return [(i, (end, end + w.size), (start, end))
                for i, (start, end) in enumerate(session_bounds(w, rows))]
    step = w.size if w.kind == "tumble" else w.slide
    out = []
    for i, r in enumerate(rows):
        ts = r["ts"]
        if w.kind == "cumulate":
            start = ts // w.size * w.size
            ends = range(start + (ts - start) // step * step + step, start + w.size + 1, step)
        else:
            ends = range((ts // step + 1) * step, ts + w.size + 1, step)
        for e in ends:
            begin = start if w.kind == "cumulate" else e - w.size
            out.append((i, (e - 1, e - 1 + step), (begin, e, e - 1)))
    return out


def random_window(rng: random.Random, rel: Relation, where_of) -> Window:
    """A window for a reference to ``rel``; ``where_of(rng)`` makes a count window's WHERE."""
    kind = rng.choice(["none", "range", "range", "range", "now", "unbounded", "rows", "rows",
                       "slide", "slide", "between", "session", "tumble", "hop", "cumulate",
                       "tvf_session"])
    spelling = rng.randint(0, 3)
    if kind == "tumble":
        return Window("tumble", size=rng.choice([500_000, S, 2 * S, 3 * S]))
    if kind in ("hop", "cumulate"):
        slide, size = rng.choice([(S, 2 * S), (S, 3 * S), (500_000, 2 * S), (2 * S, 4 * S)])
        return Window(kind, size=size, slide=slide)
    if kind == "tvf_session":
        return Window(kind, size=rng.choice([500_000, S, 2 * S]),
                      partition=("k",) if rng.random() < 0.5 else ())
    if kind == "range":
        return Window("range", size=rng.choice([500_000, S, 2 * S, 3 * S, 5 * S]),
                      spelling=spelling)
    if kind == "rows":
        part = ("k",) if rng.random() < 0.5 else ()
        where = where_of(rng) if rng.random() < 0.3 else None
        return Window("rows", rows=rng.randint(1, 3), partition=part, where=where)
    if kind == "slide":
        size, slide = rng.choice([(2 * S, S), (3 * S, S), (2 * S, 2 * S), (S, 2 * S),
                                  (3 * S, 1_500_000), (4 * S, 2 * S)])
        start = T0 + rng.choice([0, 500_000, S]) if rng.random() < 0.3 else None
        return Window("slide", size=size, slide=slide, start=start)
    if kind == "session":
        return Window("session", size=rng.choice([500_000, S, 2 * S]),
                      partition=("k",) if rng.random() < 0.5 else ())
    if kind == "between":
        low = T0 + rng.choice([0, S, 2 * S, 3 * S])
        return Window("between", low=low, high=low + rng.choice([2 * S, 4 * S, 8 * S]))
    return Window(kind, spelling=spelling)


def validity(window: Window, rel: Relation, rows: list, passes) -> list:
    """Each tuple's validity interval (vf, vt) under ``window``, or None when the window
    never holds it; ``passes(predicate)`` says which tuples a predicate keeps (count windows'
    WHERE)."""
    kind = window.kind
    if kind == "none":
        kind = "own" if rel.own else "unbounded"
    return _VALIDITY[kind](window, rows, passes)


def _rows_validity(w: Window, rows: list, passes) -> list:
    kept = passes(w.where) if w.where else [True] * len(rows)
    out: list = [None] * len(rows)
    parts: dict = {}
    for i, r in enumerate(rows):
        if kept[i]:
            parts.setdefault(tuple(r[c] for c in w.partition), []).append(i)
    for idx in parts.values():
        for n, i in enumerate(idx):
            later = n + w.rows
            out[i] = (rows[i]["ts"], rows[idx[later]]["ts"] if later < len(idx) else INF)
    return out


def _slide_validity(w: Window, rows: list, passes) -> list:
    start = w.start if w.start is not None else 0
    out = []
    for r in rows:
        ts = r["ts"]
        first = start - ((start - ts) // w.slide) * w.slide          # the first τ >= ts
        last = start + ((ts + w.size - 1 - start) // w.slide) * w.slide   # last τ < ts + size
        out.append((first, last + w.slide) if first <= last else None)
    return out


def session_bounds(w: Window, rows: list) -> list:
    """Each tuple's session (start, end): a partition's tuples less than the gap apart
    are one session, which ends a gap after its last tuple."""
    out: list = [None] * len(rows)
    parts: dict = {}
    for i, r in enumerate(rows):
        parts.setdefault(tuple(r[c] for c in w.partition), []).append(i)
    for idx in parts.values():
        runs = [[idx[0]]]
        for before, i in zip(idx, idx[1:]):
            if rows[i]["ts"] - rows[before]["ts"] >= w.size:
                runs.append([])
            runs[-1].append(i)
        for run in runs:
            for i in run:
                out[i] = (rows[run[0]]["ts"], rows[run[-1]]["ts"] + w.size)
    return out


_VALIDITY = {
    "range": lambda w, rows, p: [(r["ts"], r["ts"] + w.size) for r in rows],
    "now": lambda w, rows, p: [(r["ts"], r["ts"] + 1) for r in rows],
    "unbounded": lambda w, rows, p: [(r["ts"], INF) for r in rows],
    "own": lambda w, rows, p: [(r["ts"], r["te"]) for r in rows],
    "rows": _rows_validity,
    "slide": _slide_validity,
    "between": lambda w, rows, p: [(r["ts"], w.high) if w.low <= r["ts"] < w.high else None
                                   for r in rows],
    # a session's tuples hold for one gap after it ends
    "session": lambda w, rows, p: [(end, end + w.size) for _, end in session_bounds(w, rows)],
}


@dataclass
class Ref:
    """One reference to a relation in a query: which, under which window, by which alias;
    ``clause``: the window is written in TelegraphCQ's WINDOW clause, not after the name."""
    relation: str
    window: Window | None
    alias: str
    clause: bool = False
    index: int = field(default=0)
