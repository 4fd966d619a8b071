"""The seam every source of stream data implements: opened, asked for its next batch (a stream's
rows with their event times, or punctuation) until it has none, told which position cqgate has
taken in (``commit``), and closed. ``feed`` runs one into the clearinghouse, which never learns
which source it was: the ingest port's connections implement it (``ingest_port.py``), and so
will connectors that read other systems. It runs on the event loop."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa


@dataclass(frozen=True)
class Batch:
    rows: pa.Table | None = None      # the stream's columns, in arrival order
    punctuation: int | None = None    # µs: no tuple earlier than this will follow (after rows)
    position: object = None           # where the source stands after this batch


class Source(Protocol):
    stream: object          # gateway/streams/registry.py: the StreamObject it feeds
    origin: str             # what the late-tuple and error logs call it
    accepted: int           # tuples the clearinghouse took from it so far

    async def open(self) -> None: ...

    async def next_batch(self) -> Batch | None:
        """The next batch; None when the source has ended."""

    async def commit(self, position: object) -> None:
        """Every batch up to ``position`` is in the clearinghouse (on disk for an archived
        stream): a source that can replay may forget what came before."""

    async def close(self) -> None: ...


async def feed(source: Source, ingest) -> None:
    """Run ``source`` into the clearinghouse (``gateway/clearinghouse/ingest.py``) until it
    ends or fails; it is closed either way. Rows are judged one by one against those before
    them, as they arrived."""
    try:
        await source.open()
        while (batch := await source.next_batch()) is not None:
            obj = source.stream
            name = obj.relation().name
            if batch.rows is not None and batch.rows.num_rows:
                n, _ = await ingest.push(name, obj.timestamp_column, batch.rows, obj.options,
                                         source.origin, one_by_one=True,
                                         archive=obj.key if obj.archived else None)
                source.accepted += n
            if batch.punctuation is not None:
                await ingest.advance(name, batch.punctuation)
            await source.commit(batch.position)
    finally:
        await source.close()
