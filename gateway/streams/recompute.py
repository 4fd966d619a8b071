"""``RECOMPUTE query``: seed 003's batch module over stored history. Tuples later than a
stream's slack are skipped by live processing but kept in the archive; this runs the
continuous query over the archive as though every tuple had come in time, and answers with
its rows whose validity interval meets the reach of a late tuple (those that would have been
different), ordered by valid_from, each with valid_from / valid_to. How far a late tuple
reaches is the archive's half (``gateway/archive/recompute.py``)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from executor import plan as P

from gateway.archive import recompute as R
from gateway.archive.priming import History, start_primed
from gateway.pgwire import errors as E
from gateway.pgwire import types as T
from gateway.pgwire.results import Field, Rows
from gateway.streams import queries as Q
from gateway.tables.statement_context import AwaitOnLoop, StatementContext


def _shape(ctx: StatementContext, p: P.Plan) -> tuple[list, pa.Schema]:
    """The answer's fields and Arrow schema: the query's, then valid_from / valid_to unless
    it selects them."""
    fields, schema = Q.typed_fields(ctx, p)
    for name in ("valid_from", "valid_to"):
        if name not in schema.names:
            fields = fields + [Field(name, T.duck_to_pg("TIMESTAMP").oid)]
            schema = schema.append(pa.field(name, pa.timestamp("us")))
    return fields, schema


def fields(ctx: StatementContext, p: P.Plan) -> list:
    return _shape(ctx, p)[0]


def _streams(ctx: StatementContext, p: P.Plan) -> list:
    """(how it is read, catalog object) of each stream the query reads, all archived."""
    out = []
    for read in R.reads(p.root, []):
        obj = ctx.services.streams.by_relation(read.stream, kinds=("stream",))
        if obj is None or not obj.archived:
            raise E.PgError(f'stream "{read.stream}" is not archived, so late tuples cannot be '
                            "recomputed", sqlstate="55000",
                            hint="CREATE STREAM … TYPE ARCHIVED keeps every tuple, late ones "
                            "too.")
        out.append((read, obj))
    return out


def run(ctx: StatementContext, tree) -> Rows | AwaitOnLoop:
    query, tail = Q.without_order(tree.this)
    p = Q.plan_query(ctx, query)
    if p.mode == "snapshot":
        raise E.FeatureNotSupported("RECOMPUTE applies to continuous queries over streams",
                                    hint="A query over named windows only reads them at now.")
    out_fields, schema = _shape(ctx, p)
    read = _streams(ctx, p)
    spans = []
    for how, _ in read:
        late = ctx.services.ingest.log.late_times(how.stream)
        ends = np.asarray(how.reach(late), np.int64)
        spans.append(np.stack([late, ends], axis=1)[ends > late])
    spans = np.concatenate(spans) if spans else np.empty((0, 2), np.int64)
    if not len(spans):
        ctx.notices.append(("NOTICE", "00000", "no tuple the query reads has arrived "
                            "late since the server started: nothing to recompute"))
        return Rows(out_fields, schema.empty_table(), "SELECT")
    merged = R.merged(spans)
    earliest = int(merged[0, 0])            # every stream is read from there, back its reach
    history = [History.of(obj, how.stream, since_us=how.since(earliest)) for how, obj in read]
    link = ctx.services.backend
    by_start = R.matches_by_start(p.root)

    def replay(primed, seam):
        return link.recompute(p, primed, seam, merged.tolist(), by_start)

    def answer(table) -> Rows:
        table = schema.empty_table() if table is None else table.cast(schema)
        return Rows(out_fields, Q.order_and_limit(ctx, table, tail), "SELECT")
    return AwaitOnLoop(lambda: start_primed(ctx.services, history, replay), answer)
