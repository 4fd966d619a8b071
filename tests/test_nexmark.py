"""NEXMark q0, q1, q2, q5, q7, q8, q11, q14 and the interval join, Top-N and outer join of
bench/nexmark/queries.py through a real server: the generated events (10 % of them
up to 3 s late, under a 3-second slack) go in through the ingest port, each query's rows come
out of a cursor, and they must be exactly DuckDB's answer to the same definition over the
same files, on the back end and (q5, q7, q8) on Spark."""
import os
import sys

import psycopg
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.nexmark import drive, generate  # noqa: E402
from bench.nexmark.queries import QUERIES, oracle  # noqa: E402

EVENTS, RATE = 50_000, 1_000             # 50 s of event time: 5 tumbling, 25 hopping windows
AFTER = "2026-11-01 00:01:10"            # past every window's end


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nexmark")
    csv = generate.write(generate.generate(EVENTS, RATE, delayed=True), str(folder))
    return {s: str(folder / f"{s}.parquet") for s in generate.SCHEMAS}, csv


def test_the_generator_follows_the_reference_proportions(events):
    import duckdb
    files, _ = events
    con = duckdb.connect()
    n = {s: con.execute(f"SELECT count(*) FROM '{p}'").fetchone()[0] for s, p in files.items()}
    assert n == {"persons": 1000, "auctions": 3000, "bids": 46000}          # 1 : 3 : 46
    bids = files["bids"]
    # bids go to auctions that exist, one in two to the newest (hot) pair of auctions
    orphans = con.execute(f"SELECT count(*) FROM '{bids}' WHERE auction NOT IN "
                         f"(SELECT id FROM '{files['auctions']}')").fetchone()[0]
    assert orphans == 0
    # the files are in arrival order: about 10 % of events come after a later event time
    out_of_order = con.execute(
        f"SELECT avg(late::INT) FROM (SELECT date_time < max(date_time) OVER (ORDER BY "
        f"file_row_number ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS late FROM "
        f"read_parquet('{bids}', file_row_number = true))").fetchone()[0]
    assert 0.05 < out_of_order < 0.2


# the queries also run on Spark (cq.engine = spark): the windowed ones, whose plans take the
# most of the Spark engine (aggregates over aggregates, joins on a SLIDE grid)
ON_SPARK = ("q5", "q7", "q8")


@pytest.mark.parametrize("name, engine", [(n, "backend") for n in QUERIES]
                         + [(n, "spark") for n in ON_SPARK])
def test_query_matches_duckdb(server, events, name, engine):
    files, csv = events
    q = QUERIES[name]
    want = oracle(q, files)
    assert want, "the oracle must have rows to compare"
    drive.declare(server.dsn, slack="3 seconds")
    with psycopg.connect(server.dsn, autocommit=True) as c:
        for statement in q.setup:           # a Python function the query calls
            c.execute(statement)
    dsn = server.dsn + f" options='-c cq.engine={engine}'"
    # the reader stops early only after this long without a row; the wait below bounds it
    reader = drive.Reader(dsn, q.cqgate, quiet="120s").start(expect=len(want))
    try:
        drive.feed(server.ingest_port, {s: csv[s] for s in q.reads})
        drive.advance(server.dsn, q.reads, AFTER)
        reader.wait(120)
        got = sorted(map(tuple, reader.rows), key=repr)
        assert got == want
        reader.cur.execute("FETCH ALL FROM c WITH (timeout = '500ms')")      # nothing more
        assert reader.cur.fetchall() == []
    finally:
        reader.close()
    with psycopg.connect(server.dsn, autocommit=True) as c:
        names = ", ".join(f"'{s}'" for s in q.reads)
        late = c.execute(f"SELECT coalesce(sum(late), 0) FROM cq_streams WHERE stream IN "
                         f"({names})").fetchone()[0]
    assert late == 0                     # the slack absorbed every delay


def test_q5_over_a_burst_matches_duckdb(server, tmp_path):
    """q5 over 20,000 events of 0.2 s: its MAX over no counts yet (NULL, an Arrow column of
    type null) and the counts after it meet in the join's buffer, which once failed (XX000)."""
    csv = generate.write(generate.generate(20_000, 100_000, delayed=False), str(tmp_path))
    files = {s: str(tmp_path / f"{s}.parquet") for s in generate.SCHEMAS}
    q = QUERIES["q5"]
    want = oracle(q, files)
    drive.declare(server.dsn)
    reader = drive.Reader(server.dsn, q.cqgate, quiet="120s").start(expect=len(want))
    try:
        drive.feed(server.ingest_port, {"bids": csv["bids"]})
        drive.advance(server.dsn, q.reads, AFTER)
        reader.wait(60)
        assert sorted(map(tuple, reader.rows), key=repr) == want
    finally:
        reader.close()


def test_the_cpu_meter_counts_what_the_server_spent():
    """The throughput records' CPU per event: a process standing for the gateway spins for
    0.3 s of CPU while the meter is entered, and the meter finds those 0.3 s."""
    import subprocess
    from bench.nexmark.run import CpuMeter
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "sys.stdin.readline()\n"
         "t = time.process_time()\n"
         "while time.process_time() - t < 0.3: pass\n"
         "print('spun', flush=True)\n"
         "sys.stdin.readline()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with CpuMeter(child.pid) as cpu:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "spun\n"    # still alive: its CPU is readable
    finally:
        child.kill()
        child.wait(timeout=30)
    assert set(cpu.spent) == {"gateway", "client_and_source"}    # it has no back end
    assert 0.25 <= cpu.spent["gateway"] < 5       # CPU seconds: a busy machine adds none
    assert cpu.per_event_us(1_000_000)["gateway"] == round(cpu.spent["gateway"], 2)
