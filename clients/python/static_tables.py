"""A first cqgate program with psycopg 3: a table, a parameterised query, COPY in and out.

    python clients/python/static_tables.py "host=127.0.0.1 port=55433 user=cq"
"""
import sys

import psycopg

dsn = sys.argv[1] if len(sys.argv) > 1 else "host=127.0.0.1 port=55433 user=cq"

with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("DROP TABLE IF EXISTS nodes")
    conn.execute("CREATE TABLE nodes (node INT PRIMARY KEY, room TEXT NOT NULL)")
    with conn.cursor().copy("COPY nodes FROM STDIN") as copy:
        for node, room in [(1, "lab"), (2, "hall"), (3, "lab")]:
            copy.write_row((node, room))
    rows = conn.execute("SELECT room, count(*) FROM nodes WHERE node >= %s "
                        "GROUP BY room ORDER BY room", (1,)).fetchall()
    for room, n in rows:
        print(f"{room}: {n}")
