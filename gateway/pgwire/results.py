"""What running a statement yields, as the wire layer sends it: the fields of a RowDescription,
rows materialised in an Arrow table (``Rows``), or a command tag (``Done``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from gateway.pgwire import types as T


@dataclass(frozen=True)
class Field:
    name: str
    type_oid: int
    typmod: int = -1
    table_oid: int = 0
    attnum: int = 0

    @property
    def typlen(self) -> int:
        t = T.BY_OID.get(self.type_oid)
        return t.typlen if t else -1


@dataclass
class Rows:
    """A row-returning result, materialised; ``pos`` advances as a portal is fetched."""
    fields: list
    table: pa.Table
    tag: str = "SELECT"
    pos: int = 0

    @property
    def remaining(self) -> int:
        return self.table.num_rows - self.pos


@dataclass
class Done:
    tag: str
    notices: list = field(default_factory=list)
