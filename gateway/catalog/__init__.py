"""The catalog clients browse: pg_catalog emulation over DuckDB plus cqgate's own relations."""
