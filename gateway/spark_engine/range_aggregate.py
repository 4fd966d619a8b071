"""α over ω RANGE grouped by a key, on Spark: the back end's aggregate index per key, inside
Spark's arbitrary stateful processing (``transformWithStateInPandas``, RocksDB state store).

A key's state is one value: its tuples still valid (their times and arguments, as numpy
arrays, pickled) and how far its rows have gone out. Each micro-batch that moves Spark's
watermark to W calls every live key (new tuples, or the timer each key sets just past the
watermark): its rows for [gone out, W) leave, one per stretch in which the set of valid tuples
does not change (a tuple at ts counts over [ts, ts + range)), cut at W as a BOUNDARY cuts the
back end's; tuples whose range ended by W are dropped. So every row a batch gives starts at
the watermark of the batch before or later: rows come in valid_from order. Over ω PARTITION
BY k ROWS n grouped by k (``RowsAggregate``) the same, a tuple valid until the n-th later
one of its key.
"""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

# (no leading underscores: Spark hands a pandas UDF such columns renamed by position)
TS_US = "cq_ts_us"              # a tuple's event time in µs, in the input
SEQ = "cq_seq"                  # a tuple's place in the stream, in a ROWS window's input
FROM, TO = "cq_from", "cq_to"   # a row's interval in µs, in the output


def _sum(v):
    return v.sum() if len(v) else None


# partial -> what it is over the non-NULL arguments of the tuples valid in a stretch
_PARTIALS = {
    "sum": _sum,
    "count": len,
    "min": lambda v: v.min() if len(v) else None,
    "max": lambda v: v.max() if len(v) else None,
}


def rows_ends(ts, n: int):
    """Where each of a partition's tuples (event times ``ts``, in its order) stops being
    valid in a [ROWS n] window: the n-th later one's time; the last n never (int64's max)."""
    ends = np.full(len(ts), np.iinfo(np.int64).max)
    ends[:max(len(ts) - n, 0)] = ts[n:]
    return ends


class KeyedState(StatefulProcessor):
    """One pickled state value per key, and ``_run(key, new tuples or None, Spark's
    watermark in ms)`` called with a key's new tuples and at the timer ``_keep`` sets just
    past the watermark, so every key holding state is called at each micro-batch that moves
    the watermark."""

    def init(self, handle) -> None:
        self.handle = handle
        self.state = handle.getValueState("tuples", "blob BINARY")

    def handleInputRows(self, key, rows, timerValues):
        frames = [f for f in rows if len(f)]
        new = pd.concat(frames, ignore_index=True) if frames else None
        yield from self._run(key, new, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        yield from self._run(key, None, timerValues.getCurrentWatermarkInMs())

    def close(self) -> None:
        pass

    def _run(self, key, new, watermark_ms: int):
        raise NotImplementedError

    def _load(self) -> dict | None:
        return pickle.loads(self.state.get()[0]) if self.state.exists() else None

    def _keep(self, st: dict, holding: bool, watermark_ms: int) -> None:
        """Store ``st`` and be called again at the next watermark, or (``holding`` nothing)
        forget the key."""
        if holding:
            self.state.update((pickle.dumps(st),))
            self.handle.registerTimer(watermark_ms + 1)
        else:
            self.state.clear()


class RangeAggregate(KeyedState):
    """``keys``: the key columns; ``partials``: (name, func) with func sum, count,
    count_star, min or max over the column of the same name; ``range_us``: the window;
    ``integral``: per partial, whether its answer is an integer."""

    def __init__(self, keys: list, partials: list, range_us: int, integral: list):
        self.keys, self.partials, self.range_us = keys, partials, range_us
        self.integral = integral        # per partial: whether its answer is an integer

    def _run(self, key, new, watermark_ms: int):
        st = self._load()
        if new is not None:
            ts = new[TS_US].to_numpy(np.int64)
            args = {n: new[n].to_numpy() for n, f in self.partials if f != "count_star"}
            if st is None:
                st = {"ts": ts, "args": args, "out": int(ts.min())}
            else:
                st["ts"] = np.concatenate([st["ts"], ts])
                st["args"] = {n: np.concatenate([st["args"][n], a]) for n, a in args.items()}
            self._arrived(st, new)
        if st is None:
            return
        now = watermark_ms * 1000
        rows = self._rows(key, st, now) if now > st["out"] else []
        if now > st["out"]:
            st["out"] = now
            alive = self._ends(st) > now
            st["ts"] = st["ts"][alive]
            st["args"] = {n: a[alive] for n, a in st["args"].items()}
            self._kept(st, alive)
        self._keep(st, len(st["ts"]) > 0, watermark_ms)
        if rows:
            names = self.keys + [n for n, _ in self.partials] + [FROM, TO]
            yield pd.DataFrame(rows, columns=names)

    def _arrived(self, st: dict, new) -> None:
        """New tuples were added to the state (``st``'s arrays, then ``new``'s rows)."""

    def _kept(self, st: dict, alive) -> None:
        """The state kept its tuples ``alive`` only."""

    def _ends(self, st: dict):
        """Where each tuple of the state stops being valid (µs)."""
        return st["ts"] + self.range_us

    def _rows(self, key, st: dict, now: int) -> list:
        """The rows of [gone out, now): one a stretch with the same valid tuples, those
        with none left out (a key with nothing valid has no row)."""
        ts, start, ends = st["ts"], st["out"], self._ends(st)
        cuts = np.unique(np.concatenate([ts, ends]))
        cuts = cuts[(cuts > start) & (cuts < now)]
        bounds = [start, *cuts.tolist(), now]
        out, last = [], None
        for a, b in zip(bounds[:-1], bounds[1:]):
            live = (ts <= a) & (a < ends)
            if not live.any():
                last = None
                continue
            values = [self._value(st, f, n, live, whole)
                      for (n, f), whole in zip(self.partials, self.integral)]
            if last is not None and last[-1] == a and last[len(key):-2] == values:
                last[-1] = b                       # the same answer goes on: one row
                continue
            last = [*key, *values, a, b]
            out.append(last)
        return out

    @staticmethod
    def _value(st: dict, func: str, name: str, live, whole: bool):
        if func == "count_star":
            return int(live.sum())
        v = st["args"][name][live]
        v = v[~pd.isna(v)]              # pandas reads an integer column with NULLs as floats
        got = _PARTIALS[func](v)
        if isinstance(got, np.datetime64):      # MIN / MAX of a TIMESTAMP
            return pd.Timestamp(got).to_pydatetime()
        got = got.item() if hasattr(got, "item") else got
        return int(got) if whole and got is not None else got


class RowsAggregate(RangeAggregate):
    """α over ω PARTITION BY keys ROWS n grouped by those keys: a key's valid tuples are its
    last n, a tuple valid from its ts until the ts of the n-th later one (at one instant,
    in the stream's order, ``SEQ``); its last n never stop being valid."""

    def __init__(self, keys: list, partials: list, rows: int, integral: list):
        super().__init__(keys, partials, 0, integral)
        self.n = rows

    def _arrived(self, st, new):
        seq = new[SEQ].to_numpy(np.int64)
        st["seq"] = seq if "seq" not in st else np.concatenate([st["seq"], seq])
        order = np.lexsort((st["seq"], st["ts"]))
        st["ts"], st["seq"] = st["ts"][order], st["seq"][order]
        st["args"] = {n: a[order] for n, a in st["args"].items()}

    def _kept(self, st, alive):
        st["seq"] = st["seq"][alive]

    def _ends(self, st):
        return rows_ends(st["ts"], self.n)
