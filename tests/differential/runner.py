"""Running cases through a real server and judging them. A round makes fresh streams and a
table, declares every case as a holdable cursor (a refusal is recorded with its SQLSTATE),
starts every stream at T0, inserts the data in its batches, advances every stream past the
end, and reads each cursor dry. A read of ``cq_queries`` after the last advance is a barrier:
the back end answers it after the rows the advance released, which the gateway has then
queued for their cursors.

Each outcome is one of: refused with a user error (0A000 with a hint, 42xxx, 22xxx); accepted
and equal to the oracle at every instant where either side changes (and 1 µs before it); or
a failure: an internal error, an error while reading, a wrong answer (the first wrong
instant), a column of the wrong type family, a row with an empty interval. ``shrink`` cuts a
failing case down to fewer tuples and a simpler query that still fails the same way."""
from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from .grammar import Case, simpler
from .oracle import Oracle, OracleError, duck_family, normal, pg_family
from .world import FUNCTION, INF, PYTHON_FUNCTION, RELATIONS, STREAMS, T0, Data, S, timestamp

USER_CLASSES = ("0A", "42", "22")
# a cursor on Spark is read once its progress reaches the end, or after this long (s)
SPARK_WAIT_S = 120
# Spark's watermark at the end: the data's end less 1.001 ms, in whole milliseconds
SPARK_SHORT_US = 2_000
_EPOCH = dt.datetime(1970, 1, 1)
_ONE_US = dt.timedelta(microseconds=1)


@dataclass
class Outcome:
    case: Case
    status: str                  # refused, ok, errored (as SQL does), or a failure:
    sqlstate: str | None = None  # internal, misrefused, fetch, wrong, type, interval, oracle
    message: str = ""
    detail: str = ""
    rows: int = 0
    how: str = "cursor"          # cursor, derived (a derived stream read, with progress
                                 # rows), window (Stream(w) of a named window, so too),
                                 # snapshot (cq.mode = snapshot), progress (WITH (progress =
                                 # true)), resumed / derived resumed / window resumed (its
                                 # resume_from a progress row of that one), primed (declared
                                 # with the data in, its windows filled from the archive),
                                 # spark (a cursor run on Spark: cq.engine = spark)

    @property
    def failed(self) -> bool:
        return self.status not in ("refused", "ok", "errored")


# every fourth case is also run as a derived stream, every fourth as a named window, every
# fourth with progress rows and resumed from one of them; a derived stream's and a named
# window's rows are read with progress rows and resumed from one too
VARIANTS = ("derived", "progress", "window", None)
# a resumed reading -> the reading it resumes
MADE_OF = {"resumed": "progress", "derived resumed": "derived", "window resumed": "window"}
# every second accepted case whose windows all reach back is declared again once the data is
# in (at the snapshots' instant): started there, primed from the archive, its answer from
# then on must be the oracle's. A window that starts with its query ([UNBOUNDED], a stream
# read without one, ROWS, a session) holds nothing from before, as in TelegraphCQ
PRIMED_WINDOWS = ("range", "slide", "between", "tumble", "hop", "cumulate", "now")


def primable(case: Case) -> bool:
    return all(r.window is not None and r.window.kind in PRIMED_WINDOWS
               for r in case.refs if r.relation in STREAMS)


@dataclass
class Round:
    """``cases`` over ``data`` on the server at ``dsn``, each as a cursor and ``variants``:
    None, every fourth case also as a derived stream and every fourth as a named window, and
    every accepted one in snapshot mode; or the hows every case is also run as (shrinking
    runs one case one way)."""
    dsn: str
    cases: list
    data: Data
    variants: tuple | None = None
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    # one oracle per case, shared by every reading of it (cursor, snapshot, progress, …):
    # building one loads the case's snapshot tables into DuckDB, its answers are cached
    _oracles: dict = field(default_factory=dict, init=False, repr=False)
    _since: int | None = field(default=None, init=False, repr=False)   # primed cursors' start

    def _oracle(self, case: Case) -> Oracle:
        if id(case) not in self._oracles:
            self._oracles[id(case)] = Oracle(case.oracle(), case.refs, self.data)
        return self._oracles[id(case)]

    def _variant(self, i: int) -> str | None:
        if self.variants is None:
            return VARIANTS[i % len(VARIANTS)]
        # (a resumed reading is made of a progress one, or of a derived stream's)
        return next((MADE_OF.get(h, h) for h in self.variants
                     if h in ("derived", "window", "progress", *MADE_OF)), None)

    def _snapshots(self) -> bool:
        return self.variants is None or bool({"snapshot", "primed"} & set(self.variants))

    @property
    def _spark(self) -> bool:
        """Every case as a cursor on Spark (``variants`` ("spark",)), and no other way."""
        return self.variants is not None and "spark" in self.variants

    def _primed(self, i: int, case: Case) -> bool:
        return primable(case) and (i % 2 == 0 if self.variants is None
                                   else "primed" in self.variants)

    def run(self) -> list:
        names = {r: f"{r}_{self.tag}" for r in RELATIONS}
        names["fn"] = f"fn_{self.tag}"
        names["pyfn"] = f"pyfn_{self.tag}"
        with psycopg.connect(self.dsn, autocommit=True) as feed, \
                psycopg.connect(self.dsn, autocommit=True) as reader:
            for c in (feed, reader):
                c.execute("SET statement_timeout = '60s'")
            if self._spark:
                reader.execute("SET cq.engine = spark")
            for r, rel in RELATIONS.items():
                feed.execute(rel.create(names[r]))
            feed.execute(FUNCTION.format(name=names["fn"]))
            feed.execute(PYTHON_FUNCTION.format(name=names["pyfn"]))
            rows = self.data.table_insert(names["tb"])
            if rows:
                feed.execute(rows)
            outcomes, cursors = [], {}
            try:
                for i, case in enumerate(self.cases):
                    first = "spark" if self._spark else "cursor"
                    refused = self._declare(reader, f"dq{i}", case.cql(names), case, first)
                    if refused is not None:
                        outcomes.append(self._refusal(refused))
                        continue
                    cursors[f"dq{i}"] = (case, first)
                    if self._spark and i % 2 == 0:     # every other one as a window too
                        refused = self._spark_window(feed, i, case, names)
                        if refused is not None:
                            outcomes.append(self._refusal(refused))
                        else:
                            cursors[f"dw{i}"] = (case, "spark window")
                    how = None if self._spark else self._variant(i)
                    if how == "progress":
                        refused = self._declare(reader, f"dp{i}",
                                                with_progress(case.cql(names)), case, how)
                        if refused is not None:     # the query runs, so must this
                            refused.status = "misrefused"
                            outcomes.append(refused)
                        else:
                            cursors[f"dp{i}"] = (case, how)
                    elif how is not None:
                        refused = self._relation(feed, reader, i, case, names, how)
                        if refused is not None:
                            outcomes.append(self._refusal(refused))
                        else:
                            cursors[f"d{how[0]}{i}"] = (case, how)
                for s in STREAMS:
                    feed.execute(f"ALTER STREAM {names[s]} ADVANCE TO {timestamp(T0)}")
                for sql in self.data.inserts(names):
                    feed.execute(sql)
                if self._snapshots():             # every stream at one instant: snapshots
                    at = self.data.last + S // 2
                    for s in STREAMS:
                        feed.execute(f"ALTER STREAM {names[s]} ADVANCE TO {timestamp(at)}")
                    if self.variants is None or "snapshot" in self.variants:
                        outcomes += [self._snapshot(case, names, at) for case, how in
                                     cursors.values() if how == "cursor"]
                    self._since = at
                    for name, (case, how) in list(cursors.items()):
                        if how == "cursor" and self._primed(int(name[2:]), case):
                            refused = self._declare(reader, f"dm{name[2:]}", case.cql(names),
                                                    case, "primed")
                            if refused is not None:     # it ran once, so must it now
                                refused.status = "misrefused"
                                outcomes.append(refused)
                            else:
                                cursors[f"dm{name[2:]}"] = (case, "primed")
                for s in STREAMS:
                    feed.execute(f"ALTER STREAM {names[s]} ADVANCE TO "
                                 f"{timestamp(self.data.end)}")
                reader.execute("SELECT count(*) FROM cq_queries").fetchall()     # the barrier
                for name, (case, how) in list(cursors.items()):
                    if how == "spark":
                        outcomes.append(self._read_spark(reader, name, case))
                        continue
                    if how == "spark window":
                        outcomes.append(self._read_spark_window(reader, name, case))
                        continue
                    if how not in MADE_OF.values():
                        outcomes.append(self._read(reader, name, case, how))
                        continue
                    progress, resumed, declared = self._read_progress(reader, name, case,
                                                                      names, how)
                    outcomes += [o for o in (progress, resumed) if o is not None]
                    if declared:
                        cursors[f"dr{name[2:]}"] = (case, "resumed")
            finally:
                for name, (_, how) in cursors.items():
                    reader.execute(f"DROP WINDOW {name}_{self.tag}" if how == "spark window"
                                   else f"CLOSE {name}")
                for r, rel in RELATIONS.items():
                    word = "TABLE" if rel.kind == "table" else "STREAM"
                    feed.execute(f"DROP {word} IF EXISTS {names[r]} CASCADE")
                feed.execute(f"DROP FUNCTION IF EXISTS {names['fn']}")
                feed.execute(f"DROP FUNCTION IF EXISTS {names['pyfn']}")
                for oracle in self._oracles.values():
                    oracle.close()
                self._oracles.clear()
        return outcomes

    @staticmethod
    def _declare(con, name: str, sql: str, case: Case, how: str = "cursor") -> Outcome | None:
        """None when the statement ran, else its refusal (or an internal error)."""
        try:
            con.execute(sql if sql.startswith("CREATE") else
                        f"DECLARE {name} CURSOR WITH HOLD FOR {sql}")
            return None
        except psycopg.Error as e:
            diag = e.diag
            state = diag.sqlstate or "?"
            msg = diag.message_primary or str(e)
            user = state[:2] in USER_CLASSES and (state != "0A000" or diag.message_hint)
            return Outcome(case, "refused" if user else "internal", state, msg,
                           f"hint: {diag.message_hint}" if state == "0A000" else "", how=how)

    def _refusal(self, outcome: Outcome) -> Outcome:
        """A user error the oracle does not share is a misrefusal; but a derived stream or
        named window, like a view, cannot have two columns of one name (42701)."""
        if outcome.status == "refused" and outcome.sqlstate[:2] in ("42", "22") and \
                not (outcome.how != "cursor" and outcome.sqlstate == "42701") and \
                oracle_error(outcome.case, self.data) is None:
            outcome.status = "misrefused"           # the user did nothing wrong
        return outcome

    def _relation(self, feed, reader, i: int, case: Case, names: dict, how: str):
        """The case as a derived stream or named window, and a cursor over its rows."""
        rel = f"d{how[0]}{i}_{self.tag}"
        word = "STREAM" if how == "derived" else "WINDOW"
        refused = self._declare(feed, rel, f"CREATE {word} {rel} AS {case.plain(names)}",
                                case, how)
        if refused is not None:
            return refused
        # read with progress rows, then resumed from one
        return self._declare(reader, f"d{how[0]}{i}", with_progress(_over(_rows_of(rel))),
                             case, how)

    def _spark_window(self, feed, i: int, case: Case, names: dict) -> Outcome | None:
        """The case as a named window on Spark (None: made)."""
        return self._declare(feed, "", f"CREATE WINDOW dw{i}_{self.tag} AS "
                             f"{case.plain(names)} WITH (engine = 'spark')", case,
                             "spark window")

    def _read_spark_window(self, reader, name: str, case: Case) -> Outcome:
        """A named window on Spark, read once its query's progress has reached Spark's last
        watermark: the answer at the instant before its progress."""
        window, deadline = f"{name}_{self.tag}", time.monotonic() + SPARK_WAIT_S
        upto, reached = self.data.end - SPARK_SHORT_US, None
        while time.monotonic() < deadline:
            got = reader.execute("SELECT progress, state FROM cq_queries WHERE name = %s",
                                 [window]).fetchall()
            reached = _us(got[0][0]) if got and got[0][0] is not None else None
            if not got or got[0][1] == "failed" or (reached or upto - 1) >= upto:
                break
            time.sleep(0.5)
        if reached is None:
            return Outcome(case, "fetch", message=f"{window} answered for no instant in "
                           f"{SPARK_WAIT_S} s", how="spark window")
        return self._answer_at(case, lambda: reader.execute(f"SELECT * FROM {window}")
                               .fetchall(), reached - 1, "spark window",
                               f"wrong answer at {_at(reached - 1)}")

    def _snapshot(self, case: Case, names: dict, at: int) -> Outcome:
        """The case in snapshot mode, every stream's watermark at ``at``: the snapshot's
        answer at that instant."""
        def read():
            with psycopg.connect(self.dsn, autocommit=True,
                                 options="-c cq.mode=snapshot") as c:
                return c.execute(case.plain(names)).fetchall()
        return self._answer_at(case, read, at, "snapshot", f"wrong snapshot at {_at(at)}")

    def _answer_at(self, case: Case, read, at: int, how: str, wrong: str) -> Outcome:
        """The case's answer at instant ``at``, its rows as ``read()`` gives them, judged
        against the oracle's (``_answered``); an error reading them, as SQL's or not."""
        try:
            got = Counter(tuple(normal(v) for v in r) for r in read())
        except psycopg.Error as e:
            state = e.diag.sqlstate or "?"
            if state.startswith("22") and oracle_error(case, self.data):
                return Outcome(case, "errored", state, str(e), how=how)
            return Outcome(case, "fetch", state, e.diag.message_primary or str(e), how=how)
        try:
            want = self._oracle(case).at(at)
        except OracleError as e:
            return Outcome(case, "oracle", message=str(e), how=how)
        return _answered(case, got, want, how, wrong)

    def _read(self, reader, name: str, case: Case, how: str) -> Outcome:
        rows, oids, failed = self._fetch(reader, name, case, how)
        if failed is not None:
            return failed
        outcome = judge(case, self.data, rows, oids, self._oracle(case),
                        since=self._since if how == "primed" else None)
        outcome.how = how
        return outcome

    def _read_spark(self, reader, name: str, case: Case) -> Outcome:
        """A cursor on Spark, whose rows come micro-batch by micro-batch after the data is
        in: read once its progress (cq_queries) has reached Spark's last watermark, a
        millisecond short of the end (Spark keeps its watermark in whole milliseconds), and
        judged up to there."""
        upto, deadline = self.data.end - SPARK_SHORT_US, time.monotonic() + SPARK_WAIT_S
        while True:
            got = reader.execute("SELECT progress, state FROM cq_queries WHERE name = %s AND "
                                 "pid = pg_backend_pid()", [name]).fetchall()
            if got and got[0][0] is not None and _us(got[0][0]) >= upto:
                break
            if not got or got[0][1] == "failed" or time.monotonic() > deadline:
                break           # ended (its error comes with the FETCH), or stuck: judged
            time.sleep(0.5)
        rows, oids, failed = self._fetch(reader, name, case, "spark")
        if failed is not None:
            return failed
        starts = [r[0] for r in rows]
        if starts != sorted(starts):        # micro-batch after micro-batch, in order
            return Outcome(case, "wrong", message="rows out of valid_from order",
                           rows=len(rows), how="spark")
        outcome = judge(case, self.data, rows, oids, self._oracle(case), until=upto)
        if outcome.failed and got and (got[0][0] is None or _us(got[0][0]) < upto):
            outcome.message += (f" (its progress stood at {got[0][0]} after "
                                f"{SPARK_WAIT_S} s)")
        outcome.how = "spark"
        return outcome

    def _fetch(self, reader, name: str, case: Case, how: str) -> tuple:
        """(rows, column OIDs, None), or the outcome of an error while reading."""
        rows, oids = [], None
        try:
            for _ in range(100):
                cur = reader.execute(f"FETCH ALL FROM {name} WITH (timeout = '0')")
                oids = [d.type_code for d in cur.description]
                got = cur.fetchall()
                if not got:
                    break
                rows += got
        except psycopg.Error as e:
            state, message = e.diag.sqlstate, e.diag.message_primary or str(e)
            # a value the query cannot compute (a cast of 'x' to INT) errs in SQL too
            if state and state.startswith("22") and oracle_error(case, self.data):
                return rows, oids, Outcome(case, "errored", state, message, rows=len(rows),
                                           how=how)
            return rows, oids, Outcome(case, "fetch", state, message, rows=len(rows), how=how)
        return rows, oids, None

    def _read_progress(self, reader, name: str, case: Case, names: dict,
                       how: str = "progress") -> tuple:
        """The case read WITH (progress = true) (``how``: itself, or a cursor over its
        derived stream or named window): its data rows must be the answer, and no row after a progress row
        may begin before it; then the same resumed from its latest progress row inside the
        data (a cursor declared now, the data all in): the rows before that row and the
        resumed cursor's must together be the answer. (outcome of the progress cursor,
        outcome of the resumed one or None when there was no progress row inside the data
        to resume from, whether the resumed cursor was declared)."""
        again_how = next(k for k, v in MADE_OF.items() if v == how)
        rows, oids, failed = self._fetch(reader, name, case, how)
        if failed is not None:
            return failed, None, False
        data, marks, last = [], [], None
        for r in rows:
            if r[0] is not None:
                marks.append(last := r[0])
            elif last is not None and r[1] < last:
                return Outcome(case, "wrong", message=f"a row beginning at {r[1]} came after "
                               f"the progress row of {last}", how=how), None, False
            else:
                data.append(r[1:])
        outcome = judge(case, self.data, data, oids[1:], self._oracle(case))
        outcome.how = how
        inside = [m for m in marks if T0 < _us(m) < self.data.end]
        if outcome.failed or not inside:
            return outcome, None, False
        at = inside[-1]
        resumed = f"dr{name[2:]}"
        sql = case.cql(names) if how == "progress" else \
            _over(_rows_of(f"{name}_{self.tag}"))
        refused = self._declare(reader, resumed, with_progress(
            sql, f", resume_from = '{at.isoformat(sep=' ')}'"), case, again_how)
        if refused is not None:
            return outcome, self._refusal(refused), False
        reader.execute("SELECT count(*) FROM cq_queries").fetchall()     # the barrier
        again, _, failed = self._fetch(reader, resumed, case, again_how)
        if failed is not None:
            return outcome, failed, True
        before = [r for r in data if r[0] < at]
        after = [r[1:] for r in again if r[0] is None]
        whole = judge(case, self.data, before + after, oids[1:], self._oracle(case))
        whole.how = again_how
        if not whole.failed and any(r[0] < at for r in after):
            whole = Outcome(case, "wrong", message=f"a resumed row begins before {at}",
                            how=again_how)
        return outcome, whole, True


def _rows_of(relation: str) -> str:
    """How a cursor reads the rows of derived stream ``dd…`` or named window ``dw…``."""
    return f"Stream({relation})" if relation.startswith("dw") else relation


def _over(relation: str) -> str:
    """A cursor's query over a derived stream's or named window's rows."""
    return f"SELECT valid_from, valid_to, * FROM {relation}"


def with_progress(sql: str, more: str = "") -> str:
    """The query WITH (progress = true…): beside its own WITH (state_ttl = …) if it ends so."""
    if sql.endswith(")") and " WITH (state_ttl = " in sql[sql.rfind(" WITH ("):]:
        return f"{sql[:-1]}, progress = true{more})"
    return f"{sql} WITH (progress = true{more})"


def _answered(case: Case, got: Counter, want: Counter, how: str, wrong: str) -> Outcome:
    """An answer at one instant (``got``) judged against the oracle's (``want``): equal, or,
    under a LIMIT without ORDER BY (check "rows"), as many of its rows as the limit allows."""
    right = (not (got - want) and sum(got.values()) == min(case.limit, sum(want.values()))) \
        if case.check == "rows" else got == want
    if right:
        return Outcome(case, "ok", rows=sum(got.values()), how=how)
    return Outcome(case, "wrong", message=wrong, detail=_difference(want, got), how=how)


def _us(v: dt.datetime) -> int:
    return (v.replace(tzinfo=None) - _EPOCH) // _ONE_US


def oracle_error(case: Case, data: Data) -> str | None:
    """The oracle's error at the first instant it has one, or None when it answers at
    every instant. DuckDB's optimiser may skip a part whose value cannot matter (the right
    side of EXCEPT ALL when the left is empty) and with it that part's error, which SQL
    gives: so the oracle is asked again with the optimiser off."""
    for optimized in (True, False):
        oracle = Oracle(case.oracle(), case.refs, data, optimized)
        try:
            for t in oracle.changes:
                oracle.at(t)
        except OracleError as e:
            return str(e)
        finally:
            oracle.close()
    return None


def judge(case: Case, data: Data, rows: list, oids: list,
          oracle: Oracle | None = None, since: int | None = None,
          until: int | None = None) -> Outcome:
    """Compare a cursor's rows (valid_from, valid_to, values…) with the oracle (``oracle``:
    the case's, kept by its caller; else one made here and closed), at every instant, or
    from ``since`` on (a cursor started then, which answers from there), up to the data's
    end (or ``until``)."""
    answer = [(_us(r[0]), INF if r[1] is None else _us(r[1]), tuple(normal(v) for v in r[2:]))
              for r in rows]
    for vf, vt, vals in answer:
        if vf >= vt:
            return Outcome(case, "interval", message=f"a row with an empty interval: "
                           f"[{_at(vf)}, {_at(vt)}) {vals}", rows=len(rows))
        if since is not None and vt <= since:
            return Outcome(case, "wrong", message=f"a row that ended at {_at(vt)}, before "
                           f"the cursor started ({_at(since)}): {vals}", rows=len(rows))
    own = oracle is None
    oracle = Oracle(case.oracle(), case.refs, data) if own else oracle
    try:
        points = set(oracle.changes)
        for vf, vt, _ in answer:
            points.update((vf, vt))
        first = T0 if since is None else since
        points.add(first)
        last = data.end if until is None else until
        instants = sorted({p - d for p in points for d in (0, 1) if first <= p - d < last})
        for t in instants:
            got = Counter(v for vf, vt, v in answer if vf <= t < vt)
            want = oracle.at(t)
            bad = (got - want) if case.check == "rows" else (got != want)
            if bad:
                return Outcome(case, "wrong", message=f"wrong answer at {_at(t)}",
                               detail=_difference(want, got), rows=len(rows))
        if oracle.types is None:
            oracle.at(T0)
        for n, (oid, t) in enumerate(zip(oids[2:], oracle.types or [])):
            want = duck_family(t)
            if want is not None and pg_family(oid) != want:
                return Outcome(case, "type", message=f"column {n + 1} is typed with OID {oid} "
                               f"({pg_family(oid)}); the snapshot's type is {t}",
                               rows=len(rows))
    except OracleError as e:
        return Outcome(case, "oracle", message=str(e), rows=len(rows))
    finally:
        if own:
            oracle.close()
    return Outcome(case, "ok", rows=len(rows))


def _difference(want: Counter, got: Counter) -> str:
    missing, extra = want - got, got - want
    lines = []
    if missing:
        lines.append("missing: " + _rows_text(missing))
    if extra:
        lines.append("extra: " + _rows_text(extra))
    return "\n".join(lines)


def _rows_text(c: Counter, limit: int = 8) -> str:
    items = [f"{_plain(r)}" + (f" x{n}" if n > 1 else "") for r, n in list(c.items())[:limit]]
    return ", ".join(items) + (" …" if len(c) > limit else "")


def _plain(row) -> str:
    return "(" + ", ".join("NULL" if v is None else repr(v[1]) for v in row) + ")"


def _at(us: int) -> str:
    return "∞" if us >= INF else f"T0+{(us - T0) / S:g}s"


# ---------------------------------------------------------------------- shrinking
def run_one(dsn: str, case: Case, data: Data, how: str = "cursor") -> Outcome | None:
    """``case`` alone, as a cursor and ``how``: its outcome that way (None: it was not run
    that way, the cursor being refused)."""
    outcomes = Round(dsn, [case], data, variants=(how,)).run()
    return next((o for o in outcomes if o.how == how), None)


def shrink(dsn: str, outcome: Outcome, data: Data, budget: int = 150) -> tuple[Outcome, Data]:
    """A smaller case and data that still fail as ``outcome`` did (same status, same way)."""
    case, tries = outcome.case, [0]

    def still(c: Case, d: Data) -> Outcome | None:
        if tries[0] >= budget:
            return None
        tries[0] += 1
        try:
            o = run_one(dsn, c, d, outcome.how)
        except psycopg.Error:
            return None
        return o if o is not None and o.status == outcome.status else None

    best = still(case, data) or outcome
    if best is outcome and tries[0] == 1:
        return outcome, data        # it does not fail alone: report it as it was
    changed = True
    while changed and tries[0] < budget:
        changed = False
        for s in STREAMS:            # fewer tuples: halves, then quarters, … then one by one
            n = len(data.tuples[s])
            size = max(1, n // 2)
            while size >= 1 and n:
                start = 0
                while start < len(data.tuples[s]):
                    drop = set(range(start, min(start + size, len(data.tuples[s]))))
                    smaller = data.without(s, drop)
                    o = still(case, smaller)
                    if o is not None:
                        data, best, changed = smaller, o, True
                    else:
                        start += size
                size //= 2
        for i in reversed(range(len(data.table))):
            smaller = data.without_rows({i})
            o = still(case, smaller)
            if o is not None:
                data, best, changed = smaller, o, True
        for c in simpler(case):
            o = still(c, data)
            if o is not None:
                case, best, changed = c, o, True
                break
    return best, data


def report(outcome: Outcome, data: Data, names: dict | None = None) -> str:
    names = names or {r: r for r in RELATIONS}
    case = outcome.case
    lines = [f"{outcome.status.upper()} ({outcome.how}): {outcome.message}"
             + (f" ({outcome.sqlstate})" if outcome.sqlstate else ""),
             f"  query: {case.cql(names)}", f"  oracle: {case.oracle()}"]
    if outcome.detail:
        lines += ["  " + ln for ln in outcome.detail.splitlines()]
    lines.append("  data (T0 = " + timestamp(T0) + "):")
    lines.append(data.describe())
    return "\n".join(lines)


ACCEPTED = ("ok", "errored", "fetch", "wrong", "type", "interval", "oracle")


def summary(outcomes: list) -> str:
    """Counts: queries, accepted, refused by SQLSTATE and message, failures by kind."""
    count = Counter(o.status for o in outcomes)
    refused = Counter((o.sqlstate, _reason(o.message)) for o in outcomes
                      if o.status == "refused")
    cursors = [o for o in outcomes if o.how in ("cursor", "spark")]
    engine = " on Spark" if any(o.how == "spark" for o in cursors) else ""
    lines = [f"{len(cursors)} queries as cursors{engine}: "
             f"{sum(o.status in ACCEPTED for o in cursors)} accepted, "
             f"{sum(o.status == 'refused' for o in cursors)} refused; "
             + ", ".join(f"{sum(o.how == h for o in outcomes)} {h} readings"
                         for h in ("derived", "derived resumed", "window", "window resumed",
                                   "snapshot", "progress", "resumed", "primed",
                                   "spark window")),
             f"{len(outcomes)} readings: {sum(count[k] for k in ACCEPTED)} accepted "
             f"({count['ok']} right at every instant, {count['errored']} ending with the "
             f"error SQL gives), {count['refused']} refused, "
             f"{sum(n for k, n in count.items() if k not in ('ok', 'errored', 'refused'))} "
             "failed"]
    for (state, reason), n in refused.most_common():
        lines.append(f"  refused {state} x{n}: {reason}")
    for kind, n in count.most_common():
        if kind not in ("ok", "errored", "refused"):
            lines.append(f"  FAILED {kind} x{n}")
    return "\n".join(lines)


# a refusal of the Spark engine: what follows says why
SPARK_REFUSAL = "the Spark engine cannot run this query with cqgate's semantics: "


def _reason(message: str) -> str:
    """A refusal's message with its particulars (names, positions) cut off, for counting."""
    spark = message.startswith(SPARK_REFUSAL)
    message = re.sub(r"_[0-9a-f]{8}\b", "", message.removeprefix(SPARK_REFUSAL))
    for cut in (":", " (", ' "'):
        message = message.split(cut)[0]
    return ("Spark: " if spark else "") + message[:90]
