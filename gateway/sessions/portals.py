"""A session's portals (SQL cursors are portals too, as in PostgreSQL) and its transaction
status; a portal that goes away ends its continuous query at once."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.link.live_rows import LiveRows
from gateway.pgwire.results import Done, Rows
from gateway.sessions.prepared import Prepared


class TxStatus(enum.Enum):
    IDLE = "I"
    IN_BLOCK = "T"
    FAILED = "E"


@dataclass
class Portal:
    name: str
    prepared: Prepared
    params: list
    result_formats: tuple
    holdable: bool = False
    result: Rows | LiveRows | Done | None = None     # filled on first Describe/Execute
    sql_cursor: bool = False

    def close(self) -> None:
        if isinstance(self.result, LiveRows):
            self.result.close()


class Portals(dict):
    """Portals by name; a portal removed or replaced ends its continuous query at once."""

    def __setitem__(self, key, value):
        old = self.get(key)
        if old is not None and old is not value:
            old.close()
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self[key].close()
        super().__delitem__(key)

    def pop(self, key, *default):
        value = super().pop(key, *default)
        if isinstance(value, Portal):
            value.close()
        return value

    def clear(self):
        for p in self.values():
            p.close()
        super().clear()
