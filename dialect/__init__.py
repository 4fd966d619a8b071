"""The CQL dialect: sqlglot's Postgres dialect, extended for cqgate (registered as ``cql``)."""
from .cql import CQL

__all__ = ["CQL"]
