"""Reads ``n`` rows of a continuous query through psqlODBC with UseDeclareFetch=1 (the driver
fetches two rows at a time from a cursor) and prints them; run as its own process so that a
driver call that never returns can be killed by the test's timeout."""
import sys

import pyodbc


def main(port: str, sql: str, n: str) -> None:
    driver = next(d for d in pyodbc.drivers() if "PostgreSQL Unicode" in d)
    conn = pyodbc.connect(f"Driver={{{driver}}};Server=127.0.0.1;Port={port};Database=cq;"
                          "Uid=cq;Pwd=;SSLmode=disable;UseDeclareFetch=1;Fetch=2", timeout=10)
    cur = conn.cursor()
    cur.execute(sql)
    for row in cur.fetchmany(int(n)):
        print(row[0], flush=True)
    conn.rollback()
    conn.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
