"""Follow a stream through ODBC (pyodbc and psqlODBC) with the ``cqgate`` data source of
odbc.ini beside this file (UseDeclareFetch=1): the driver reads the continuous query two rows
at a time, as they come, while a second connection inserts once the query runs.

    ODBCINI=clients/odbc/odbc.ini python clients/odbc/follow.py [port]
"""
import sys
import threading
import time

import pyodbc

port = sys.argv[1] if len(sys.argv) > 1 else "55433"
source = f"DSN=cqgate;Port={port}"          # attributes given here win over odbc.ini's


def feed() -> None:
    conn = pyodbc.connect(source, autocommit=True, timeout=10)
    while not conn.execute("SELECT count(*) FROM cq_queries "
                           "WHERE query LIKE '%FROM otrips%'").fetchone()[0]:
        time.sleep(0.05)
    conn.execute("INSERT INTO otrips VALUES (1, 12.5, '2026-10-01 08:05'), "
                 "(2, 30.0, '2026-10-01 08:12'), (1, 11.0, '2026-10-01 08:20'), "
                 "(2, 9.0, '2026-10-01 08:31')")
    conn.close()


admin = pyodbc.connect(source, autocommit=True, timeout=10)
admin.execute("DROP STREAM IF EXISTS otrips CASCADE")
admin.execute("CREATE STREAM otrips (zone INT, fare DOUBLE PRECISION, "
              "t TIMESTAMP TIMESTAMPCOLUMN)")
feeder = threading.Thread(target=feed)
feeder.start()
conn = pyodbc.connect(source, timeout=10)
cur = conn.cursor()
cur.execute("SELECT zone, fare FROM otrips")
for zone, fare in cur.fetchmany(3):
    print(f"zone {zone}: {fare}")
conn.rollback()                              # ends the cursor, and the query with it
conn.close()
feeder.join()
admin.close()
