"""Follow a stream with psycopg 3: COPY readings into a stream on one connection, and read a
continuous query through a named (server-side) cursor on another, rows as they come.

    python clients/python/follow_psycopg.py "host=127.0.0.1 port=55433 user=cq"
"""
import datetime as dt
import sys

import psycopg

dsn = sys.argv[1] if len(sys.argv) > 1 else "host=127.0.0.1 port=55433 user=cq"
start = dt.datetime(2026, 10, 1, 8, 0)

with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as reader:
    admin.execute("DROP STREAM IF EXISTS readings CASCADE")
    admin.execute("CREATE STREAM readings (sensor INT, temp DOUBLE, "
                  "t TIMESTAMP TIMESTAMPCOLUMN)")
    # a named cursor is a DECLARE: the continuous query starts now, before the data
    with reader.cursor(name="hot") as hot:
        hot.execute("SELECT sensor, temp, t FROM readings WHERE temp > 25 LIMIT 3")
        with admin.cursor().copy("COPY readings FROM STDIN") as copy:
            for i, temp in enumerate([21.0, 26.5, 24.0, 27.0, 30.5, 22.0]):
                copy.write_row((i % 2, temp, start + dt.timedelta(seconds=i)))
        for sensor, temp, t in hot.fetchmany(3):     # waits until three have come
            print(f"{t:%H:%M:%S} sensor {sensor}: {temp}")
    reader.commit()
