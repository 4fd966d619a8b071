"""Follow a stream with asyncpg: a cursor over a continuous query (asyncpg cursors live in a
transaction), fed from a second connection while it waits.

    python clients/python/follow_asyncpg.py postgresql://cq@127.0.0.1:55433/cq
"""
import asyncio
import datetime as dt
import sys

import asyncpg

DSN = sys.argv[1] if len(sys.argv) > 1 else "postgresql://cq@127.0.0.1:55433/cq"
START = dt.datetime(2026, 10, 1, 8, 0)


async def feed(conn) -> None:
    # wait until the query runs in the back end (cq_queries lists it), then insert
    while not await conn.fetchval("SELECT count(*) FROM cq_queries "
                                  "WHERE query LIKE '%FROM meters%'"):
        await asyncio.sleep(0.05)
    await conn.executemany("INSERT INTO meters VALUES ($1, $2, $3)",
                           [(i % 3, 10.0 * i, START + dt.timedelta(seconds=i))
                            for i in range(6)])


async def main() -> None:
    admin = await asyncpg.connect(DSN)
    reader = await asyncpg.connect(DSN)
    try:
        await admin.execute("DROP STREAM IF EXISTS meters CASCADE")
        await admin.execute("CREATE STREAM meters (meter INT, kwh DOUBLE, "
                            "t TIMESTAMP TIMESTAMPCOLUMN)")
        feeder = asyncio.create_task(feed(admin))
        async with reader.transaction():
            cur = await reader.cursor("SELECT meter, kwh FROM meters WHERE kwh >= $1", 20.0)
            for meter, kwh in await cur.fetch(3):       # waits until three have come
                print(f"meter {meter}: {kwh} kWh")
        await feeder
    finally:
        await admin.close()
        await reader.close()


asyncio.run(main())
