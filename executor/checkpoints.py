"""Checkpoints of a running query's operator state: ``save`` writes, at a watermark, every
operator's state into one directory (each Arrow table or batch it holds as an Arrow IPC file,
the small rest beside them), ``load`` reads it back, ``latest`` finds the newest complete one.

A checkpoint says where it stands: ``positions``, {stream: the BOUNDARY its operators had
taken, with no tuple at or after it}. A query restored from it reads the archive from there on
rather than as far back as its windows reach. A checkpoint appears whole or not at all (written
under a temporary name, then renamed), and only the newest ``KEEP`` stay."""
from __future__ import annotations

import collections
import io
import json
import os
import pickle
import shutil

import numpy as np
import pyarrow as pa

KEEP = 2                    # the newest checkpoints kept of a query
_STATE = "state.pickle"
_META = "meta.json"
_ARROW = (pa.Table, pa.RecordBatch)

# objects the state refers to but cannot carry (functions built at import), by name: an
# operator's module registers them (``constant``) and a checkpoint holds their names
_CONSTANTS: dict = {}
_NAMES: dict = {}


class NotSaved(Exception):
    """The state holds something a checkpoint cannot carry (a user aggregate's functions)."""


def constant(name: str, obj) -> None:
    """Let checkpoints refer to ``obj`` as ``name`` (the same object in every process)."""
    _CONSTANTS[name] = obj
    _NAMES[id(obj)] = name


class _Pickler(pickle.Pickler):
    def __init__(self, file, folder: str):
        super().__init__(file, protocol=5)
        self.folder, self.tables = folder, 0

    def persistent_id(self, obj):
        if isinstance(obj, _ARROW):
            name = f"{self.tables}.arrow"
            self.tables += 1
            with pa.OSFile(os.path.join(self.folder, name), "wb") as f, \
                    pa.ipc.new_file(f, obj.schema) as w:
                w.write(obj)
            return ("arrow", name, isinstance(obj, pa.Table))
        name = _NAMES.get(id(obj))
        return None if name is None else ("constant", name)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, folder: str):
        super().__init__(file)
        self.folder = folder

    def persistent_load(self, pid):
        if pid[0] == "constant":
            return _CONSTANTS[pid[1]]
        _, name, whole = pid
        # read into memory: the checkpoint may be replaced while the state lives on
        with pa.memory_map(os.path.join(self.folder, name)) as source:
            table = pa.ipc.open_file(source).read_all()
        table = table.combine_chunks() if whole else table
        if whole:
            return table
        return table.to_batches()[0] if table.num_rows else \
            pa.RecordBatch.from_pylist([], schema=table.schema)


def save(directory: str, positions: dict, states: list, edges: dict | None = None) -> str:
    """Write a checkpoint of ``states`` (one per operator, in the query's order; None for an
    operator that keeps nothing) at ``positions`` under ``directory``; returns its path.
    ``edges``: {stream: its tuples at its position that the state has seen}. The older ones
    past ``KEEP`` go."""
    os.makedirs(directory, exist_ok=True)
    done = _complete(directory)
    name = f"{int(done[-1]) + 1 if done else 1:010d}"         # in the order written
    tmp = os.path.join(directory, "." + name)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        buf = io.BytesIO()
        _Pickler(buf, tmp).dump({"operators": states, "edges": edges or {}})
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise NotSaved(str(e)) from None
    with open(os.path.join(tmp, _STATE), "wb") as f:
        f.write(buf.getbuffer())
    with open(os.path.join(tmp, _META), "w") as f:
        json.dump({"positions": positions, "operators": len(states)}, f)
    os.rename(tmp, os.path.join(directory, name))
    for old in _complete(directory)[:-KEEP]:
        shutil.rmtree(os.path.join(directory, old), ignore_errors=True)
    return os.path.join(directory, name)


def _complete(directory: str) -> list:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if not n.startswith("."))


def positions(path: str) -> dict:
    with open(os.path.join(path, _META)) as f:
        return json.load(f)["positions"]


def latest(directory: str) -> str | None:
    """The newest complete checkpoint under ``directory``, if any."""
    done = _complete(directory)
    return os.path.join(directory, done[-1]) if done else None


def load(path: str) -> tuple[list, dict]:
    """The operator states a checkpoint holds and its edges (``save``'s ``states``,
    ``edges``)."""
    with open(os.path.join(path, _STATE), "rb") as f:
        saved = _Unpickler(f, path).load()
    return saved["operators"], saved["edges"]


def unseen(history: pa.Table, ts: pa.Array, at: int, edge: pa.Table | None) -> pa.Table:
    """A stream's archived tuples from a checkpoint's position ``at`` on (``ts``: their
    times, µs) less those at ``at`` its state has seen (``edge``), value for value: equal
    tuples are told apart by count, not by order."""
    if edge is None or not edge.num_rows:
        return history
    cols = [c for c in edge.schema.names if c in history.schema.names]
    seen = collections.Counter(tuple(r.values()) for r in edge.select(cols).to_pylist())
    keep = np.ones(history.num_rows, dtype=bool)
    at_edge = np.flatnonzero(ts.to_numpy(zero_copy_only=False) == at)
    rows = history.select(cols).take(pa.array(at_edge)).to_pylist()
    for i, row in zip(at_edge, rows):
        key = tuple(row.values())
        if seen[key]:
            seen[key] -= 1
            keep[i] = False
    return history.filter(pa.array(keep))


def remove(directory: str) -> None:
    """A query's checkpoints go with it."""
    shutil.rmtree(directory, ignore_errors=True)
