"""The vectorised result encoders against one-row-at-a-time references: DataRow messages built
with ``struct`` row by row, and timestamps printed by Python's ``datetime``."""
import datetime as dt
import struct

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from executor import pg_text
from gateway.pgwire import messages as M

EPOCH = dt.datetime(1970, 1, 1)


def reference_rows(columns: list) -> bytes:
    out = b""
    for row in zip(*(c.to_pylist() for c in columns)):
        cells = b"".join(b"\xff\xff\xff\xff" if v is None else struct.pack("!i", len(v)) + v
                         for v in row)
        out += b"D" + struct.pack("!ih", 4 + 2 + len(cells), len(row)) + cells
    return out


def reference_stamp(us: int | None) -> str | None:
    if us is None:
        return None
    text = (EPOCH + dt.timedelta(microseconds=us)).isoformat(" ")
    return text.rstrip("0") if "." in text else text


cells = st.one_of(st.none(), st.binary(max_size=12))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.lists(st.tuples(*[cells] * k), min_size=1,
                                                    max_size=40)),
       st.integers(0, 3))
def test_data_rows_match_row_by_row(rows, start):
    columns = [pa.array([r[i] for r in rows], pa.binary()) for i in range(len(rows[0]))]
    if start < len(rows):              # sliced arrays start at an offset
        columns = [c.slice(start) for c in columns]
    assert M.data_rows(columns) == reference_rows(columns)


micros = st.one_of(
    st.none(),
    st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),        # years 1..9999
    st.integers(0, 4_000_000_000).map(lambda s: s * 1_000_000),        # whole seconds
    st.integers(0, 4_000_000_000_000).map(lambda ms: ms * 1_000))       # whole milliseconds


@settings(max_examples=300, deadline=None)
@given(st.lists(micros, min_size=1, max_size=40))
def test_timestamp_text_matches_datetime(values):
    arr = pa.array(values, pa.timestamp("us"))
    assert pg_text._timestamp_text(arr).to_pylist() == [reference_stamp(v) for v in values]
