"""PostgreSQL-style errors: every error class carries its SQLSTATE, registered in one place.

Raise these anywhere in the gateway; the session turns them into ErrorResponse (S, V, C, M, P).
"""
from __future__ import annotations

REGISTRY: dict[str, type["PgError"]] = {}


class PgError(Exception):
    """An error the client sees; ``position`` is 1-based in the statement text when known."""

    sqlstate = "XX000"
    severity = "ERROR"

    def __init__(self, message: str, *, position: int | None = None, detail: str | None = None,
                 hint: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.message = message
        self.position = position
        self.detail = detail
        self.hint = hint
        if sqlstate:
            self.sqlstate = sqlstate

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        REGISTRY.setdefault(cls.sqlstate, cls)


class ProtocolViolation(PgError):
    sqlstate = "08P01"
    severity = "FATAL"


class FeatureNotSupported(PgError):
    sqlstate = "0A000"


class SyntaxError_(PgError):
    sqlstate = "42601"


class UndefinedTable(PgError):
    sqlstate = "42P01"


class UndefinedColumn(PgError):
    sqlstate = "42703"


class UndefinedFunction(PgError):
    sqlstate = "42883"


class UndefinedObject(PgError):
    sqlstate = "42704"


class DatatypeMismatch(PgError):
    sqlstate = "42804"


class DuplicateObject(PgError):
    sqlstate = "42710"


class DuplicateTable(PgError):
    sqlstate = "42P07"


class InsufficientPrivilege(PgError):
    sqlstate = "42501"


class ReservedName(PgError):
    sqlstate = "42939"


class InvalidGrantOperation(PgError):
    sqlstate = "0LP01"


class ObjectInUse(PgError):
    sqlstate = "55006"


class DependentObjectsStillExist(PgError):
    sqlstate = "2BP01"


class InvalidCursorName(PgError):
    sqlstate = "34000"


class DuplicateCursor(PgError):
    sqlstate = "42P03"


class InvalidSqlStatementName(PgError):
    sqlstate = "26000"


class DuplicatePreparedStatement(PgError):
    sqlstate = "42P05"


class InFailedTransaction(PgError):
    sqlstate = "25P02"


class NoActiveTransaction(PgError):
    sqlstate = "25P01"


class InvalidSavepoint(PgError):
    sqlstate = "3B001"


class QueryCanceled(PgError):
    sqlstate = "57014"


class IdleInTransactionTimeout(PgError):
    sqlstate = "25P03"


class AdminShutdown(PgError):
    sqlstate = "57P01"


class TooManyConnections(PgError):
    sqlstate = "53300"


class UndefinedFile(PgError):
    sqlstate = "58P01"


class InvalidPassword(PgError):
    sqlstate = "28P01"
    severity = "FATAL"


class InvalidAuthorization(PgError):
    sqlstate = "28000"
    severity = "FATAL"


class InvalidParameterValue(PgError):
    sqlstate = "22023"


class InvalidTextRepresentation(PgError):
    sqlstate = "22P02"


class DivisionByZero(PgError):
    sqlstate = "22012"


class NumericOutOfRange(PgError):
    sqlstate = "22003"


class UniqueViolation(PgError):
    sqlstate = "23505"


class NotNullViolation(PgError):
    sqlstate = "23502"


class ForeignKeyViolation(PgError):
    sqlstate = "23503"


class CheckViolation(PgError):
    sqlstate = "23514"


class UndefinedParameter(PgError):
    sqlstate = "42704"


class SerializationFailure(PgError):
    sqlstate = "40001"


class ProgramLimitExceeded(PgError):
    sqlstate = "54000"


class BadCopyFormat(PgError):
    sqlstate = "22P04"


class DataException(PgError):
    sqlstate = "22000"


class ExternalRoutineException(PgError):
    """A user's Python function raised."""
    sqlstate = "38000"


class InternalError(PgError):
    sqlstate = "XX000"


IN_FAILED_TRANSACTION_MESSAGE = (
    "current transaction is aborted, commands ignored until end of transaction block")
