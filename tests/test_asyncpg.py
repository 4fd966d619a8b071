"""asyncpg: prepared statements (binary parameters and results, an int4[] parameter that
triggers its type introspection), a cursor over a portal, and typed results."""
import asyncio
import datetime as dt
from decimal import Decimal

import asyncpg


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_prepared_array_param_and_cursor(server, table_name):
    async def main():
        conn = await asyncpg.connect(host="127.0.0.1", port=server.port, user="cq",
                                     database="cq")
        try:
            await conn.execute(f"CREATE TABLE {table_name} (a INT PRIMARY KEY, b TEXT)")
            await conn.executemany(f"INSERT INTO {table_name} VALUES ($1, $2)",
                                   [(i, f"v{i}") for i in range(1, 21)])
            rows = await conn.fetch(f"SELECT a, b FROM {table_name} WHERE a > $1 ORDER BY a", 17)
            assert [(r["a"], r["b"]) for r in rows] == [(18, "v18"), (19, "v19"), (20, "v20")]
            stmt = await conn.prepare(f"SELECT a FROM {table_name} WHERE a = ANY($1::int4[]) "
                                      "ORDER BY a")
            assert [r["a"] for r in await stmt.fetch([3, 5, 99])] == [3, 5]
            row = await conn.fetchrow(
                f"SELECT a, b, now() AS ts, ARRAY[a] AS arr, (1.5)::numeric AS n FROM "
                f"{table_name} WHERE a = $1", 2)
            assert row["a"] == 2 and row["arr"] == [2] and row["n"] == Decimal("1.5")
            assert isinstance(row["ts"], dt.datetime) and row["ts"].tzinfo is not None
            row = await conn.fetchrow("SELECT '{\"a\":1}'::jsonb AS j, '1 day'::interval AS i, "
                                      "'x'::varchar(5) AS v")
            assert row["i"] == dt.timedelta(days=1) and row["v"] == "x"
            async with conn.transaction():
                got = [r["a"] async for r in conn.cursor(
                    f"SELECT a FROM {table_name} ORDER BY a", prefetch=4)]
            assert got == list(range(1, 21))
            async with conn.transaction():
                cur = await conn.cursor(f"SELECT a FROM {table_name} ORDER BY a")
                assert [r["a"] for r in await cur.fetch(5)] == [1, 2, 3, 4, 5]
                assert (await cur.fetchrow())["a"] == 6
        finally:
            await conn.close()

    run(main())
