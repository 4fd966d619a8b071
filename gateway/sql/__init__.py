"""SQL handling in the gateway: splitting, classifying and translating PostgreSQL to DuckDB."""
