"""Follow a stream with psycopg2: a named (server-side) cursor over a continuous query,
read itersize rows at a time as they come, fed by copy_expert from another connection.

    python clients/python/follow_psycopg2.py "host=127.0.0.1 port=55433 user=cq"
"""
import io
import sys
import threading
import time

import psycopg2

dsn = sys.argv[1] if len(sys.argv) > 1 else "host=127.0.0.1 port=55433 user=cq"
admin = psycopg2.connect(dsn)
admin.autocommit = True
cur = admin.cursor()
cur.execute("DROP STREAM IF EXISTS doors CASCADE")
cur.execute("CREATE STREAM doors (door TEXT, opened BOOLEAN, t TIMESTAMP TIMESTAMPCOLUMN)")


def feed():
    """Door events, as CSV through COPY, once the query runs."""
    while True:
        cur.execute("SELECT count(*) FROM cq_queries WHERE query LIKE '%FROM doors%'")
        if cur.fetchone()[0]:
            break
        time.sleep(0.05)
    events = "".join(f"{d},{o},2026-10-01 08:00:0{k}\n" for k, (d, o) in enumerate(
        [("front", "t"), ("back", "f"), ("front", "f"), ("garage", "t"), ("back", "t")]))
    cur.copy_expert("COPY doors FROM STDIN WITH (FORMAT csv)", io.StringIO(events))


threading.Thread(target=feed, daemon=True).start()
reader = psycopg2.connect(dsn)
follow = reader.cursor(name="opened")        # DECLARE … CURSOR: the query starts here
follow.itersize = 2                          # FETCH FORWARD 2 at a time
follow.execute("SELECT door, t FROM doors WHERE opened LIMIT 3")
for door, t in follow:
    print(f"{t:%H:%M:%S} {door} opened")
reader.rollback()
