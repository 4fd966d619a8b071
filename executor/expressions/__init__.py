"""Expressions the back end evaluates without DuckDB: Arrow's compute kernels over a plan's
small expression trees (``kernels``), and the σ's of many queries answered together
(``predicate_index``)."""
