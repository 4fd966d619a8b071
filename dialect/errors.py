"""Errors the dialect and planner raise, each with the SQLSTATE PostgreSQL would use; the
gateway turns them into ErrorResponse (it reads ``sqlstate``, ``message``, ``hint``,
``position``)."""
from __future__ import annotations


class PlanError(Exception):
    sqlstate = "XX000"

    def __init__(self, message: str, *, hint: str | None = None, position: int | None = None,
                 detail: str | None = None):
        super().__init__(message)
        self.message, self.hint, self.position, self.detail = message, hint, position, detail
        self.severity = "ERROR"


class UndefinedRelation(PlanError):
    sqlstate = "42P01"


class UndefinedColumn(PlanError):
    sqlstate = "42703"


class AmbiguousColumn(PlanError):
    sqlstate = "42702"


class InvalidColumnReference(PlanError):
    sqlstate = "42P10"


class DatatypeMismatch(PlanError):
    sqlstate = "42804"


class UndefinedFunction(PlanError):
    sqlstate = "42883"


class InvalidTextRepresentation(PlanError):
    sqlstate = "22P02"


class GroupingError(PlanError):
    sqlstate = "42803"


class Unsupported(PlanError):
    sqlstate = "0A000"


class InvalidWindow(PlanError):
    sqlstate = "22023"


class PatternSyntax(PlanError):
    """A pattern that cannot mean anything: one that matches the empty sequence, a negation
    with nothing to bound it."""
    sqlstate = "42601"


class DuplicateAlias(PlanError):
    sqlstate = "42712"


def written_at(node) -> int | None:
    """Where ``node`` (a parse tree) was written (1-based, in the statement): the earliest of
    its parts the parser placed, for an error to point at."""
    starts = [n.meta["start"] for n in node.walk() if "start" in n.meta]
    return min(starts) + 1 if starts else None
