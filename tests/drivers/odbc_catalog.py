"""Every ODBC catalog function BI tools call, through psqlODBC and pyodbc, one JSON line per
call; run in a process of its own so that a crash inside the driver shows as its exit status
and the last call it reached. Arguments: port, UseDeclareFetch (0 or 1), table, other table,
stream, window."""
import json
import sys

import pyodbc

port, udf, t, u, s, w = sys.argv[1:7]
driver = next(d for d in pyodbc.drivers() if "PostgreSQL Unicode" in d)
conn = pyodbc.connect(f"Driver={{{driver}}};Server=127.0.0.1;Port={port};Database=cq;Uid=cq;"
                      f"Pwd=;SSLmode=disable;UseDeclareFetch={udf};Fetch=2", timeout=10)
cur = conn.cursor()
CALLS = {
    "tables": lambda: cur.tables(schema="public", tableType="TABLE"),
    "views": lambda: cur.tables(schema="public", tableType="VIEW"),
    "columns": lambda: cur.columns(table=t),
    "primary_keys": lambda: cur.primaryKeys(t),
    "foreign_keys_of_referenced": lambda: cur.foreignKeys(table=t),
    "foreign_keys_of_referencing": lambda: cur.foreignKeys(foreignTable=u),
    "statistics": lambda: cur.statistics(t),
    "statistics_unique": lambda: cur.statistics(u, unique=True),
    "row_id_columns": lambda: cur.rowIdColumns(t),
    "row_version_columns": lambda: cur.rowVerColumns(t),
    "type_info": lambda: cur.getTypeInfo(),
    "procedures": lambda: cur.procedures(),
    "procedure_columns": lambda: cur.procedureColumns(),
}
for name, call in CALLS.items():
    print(json.dumps({"call": name}), flush=True)          # reached, in case the driver dies
    rows = call().fetchall()
    names = [d[0] for d in cur.description]
    print(json.dumps({"call": name, "rows": [dict(zip(names, r)) for r in rows]}, default=str),
          flush=True)
