"""Example scalar Python functions for ``cqgate serve --function``: NEXMark q14's ``count_char``,
vectorised over Arrow batches.

    cqgate serve --function count_char=functions:count_char

(with this directory on PYTHONPATH). A function has ``arg_types`` and ``returns`` (SQL types in
DuckDB's spelling); with ``vectorized = True`` it is called once per batch with an Arrow array
per argument and returns an array, otherwise once per row with Python values (None for NULL);
``strict = True`` gives NULL for a NULL argument without a call.
"""
import pyarrow as pa
import pyarrow.compute as pc


def count_char(text, char):
    """How many times ``char`` occurs in ``text``: Arrow's count_substring over the whole batch
    when ``char`` is one value for all its rows (as in NEXMark q14), row by row otherwise."""
    text = text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text
    char = char.combine_chunks() if isinstance(char, pa.ChunkedArray) else char
    patterns = pc.unique(char).to_pylist()
    if len(patterns) == 1 and patterns[0] is not None:
        return pc.count_substring(text, pattern=patterns[0]).cast(pa.int32())
    return pa.array([None if t is None or c is None else t.count(c)
                     for t, c in zip(text.to_pylist(), char.to_pylist())], pa.int32())


count_char.arg_types = ["VARCHAR", "VARCHAR"]
count_char.returns = "INTEGER"
count_char.vectorized = True
