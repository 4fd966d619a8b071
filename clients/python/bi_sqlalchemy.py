"""A BI-style session with SQLAlchemy: with cq.mode = snapshot every query gets a finite
answer (the state at now), so a dashboard can read streams' windows, named windows and tables
like any PostgreSQL database.

    python clients/python/bi_sqlalchemy.py postgresql+psycopg://cq@127.0.0.1:55433/cq
"""
import sys

from sqlalchemy import create_engine, text

url = sys.argv[1] if len(sys.argv) > 1 else "postgresql+psycopg://cq@127.0.0.1:55433/cq"
engine = create_engine(url, connect_args={"options": "-c cq.mode=snapshot"})

with engine.begin() as conn:
    conn.execute(text("DROP STREAM IF EXISTS sales CASCADE"))
    conn.execute(text("DROP TABLE IF EXISTS stores"))
    conn.execute(text("CREATE TABLE stores (store INT PRIMARY KEY, city TEXT)"))
    conn.execute(text("INSERT INTO stores VALUES (1, 'Lyon'), (2, 'Porto')"))
    conn.execute(text("CREATE STREAM sales (store INT, amount DOUBLE, "
                      "t TIMESTAMP TIMESTAMPCOLUMN)"))
    conn.execute(text("CREATE WINDOW last_hour AS SELECT store, amount FROM sales "
                      "[RANGE '1 hour']"))
    conn.execute(text("INSERT INTO sales VALUES (1, 20.0, '2026-10-01 09:10'), "
                      "(2, 35.0, '2026-10-01 09:20'), (1, 15.0, '2026-10-01 09:50'), "
                      "(2, 5.0, '2026-10-01 10:30')"))

with engine.connect() as conn:
    # a named window joined with a table, as a report would read it
    for city, total in conn.execute(text(
            "SELECT stores.city, sum(amount) AS total FROM last_hour, stores "
            "WHERE stores.store = last_hour.store GROUP BY stores.city ORDER BY 1")):
        print(f"{city}: {total}")
    # a stream's window, evaluated at now because of cq.mode = snapshot
    n = conn.execute(text("SELECT count(*) FROM sales [RANGE '30 minutes']")).scalar_one()
    print(f"sales in the last 30 minutes: {n}")
