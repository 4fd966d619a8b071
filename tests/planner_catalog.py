"""The catalog the planner fixtures are written against: the seeds' streams and tables."""
from dialect.planner import MemoryCatalog, Relation

TS = ("ts", "TIMESTAMP")


def seed_catalog() -> MemoryCatalog:
    cat = MemoryCatalog(aggregates={"summary"})
    for rel in [
        # seed 001 (TelegraphCQ): temp.streams
        Relation("temp.streams", "stream", (("node", "INT"), ("airtemp", "REAL"),
                                            ("tcqtime", "TIMESTAMP")), "tcqtime"),
        # S serves two seeds' queries verbatim: seed 001's phone calls (CQL) and seed 003's
        # players (sid, location)
        Relation("S", "stream", (("customer_id", "INT"), ("type", "TEXT"),
                                 ("call_length", "DOUBLE PRECISION"), ("sid", "INT"),
                                 ("location", "DOUBLE PRECISION[]"), TS), "ts"),
        # seed 002: relations whose change streams are read with Stream(x)
        Relation("CurPrice", "table", (("stock", "TEXT"), ("price", "DOUBLE PRECISION"))),
        Relation("Stock", "table", (("stock", "TEXT"), ("company", "TEXT"))),
        # seed 003: the ball (R); P is a second player stream for join error cases
        Relation("R", "stream", (("sid", "INT"), ("location", "DOUBLE PRECISION[]"), TS), "ts"),
        Relation("P", "stream", (("sid", "INT"), ("location", "DOUBLE PRECISION[]"), TS), "ts"),
        # seed 000 (StreamAPAS): speed measurements that carry their own intervals
        Relation("I", "stream", (("val", "DOUBLE PRECISION"), TS, ("te", "TIMESTAMP")), "ts",
                 "te"),
        Relation("II", "stream", (("val", "DOUBLE PRECISION"), TS, ("te", "TIMESTAMP")), "ts",
                 "te"),
        # sensors and a static table (DESIGN §1)
        Relation("sensors", "stream", (("node", "INT"), ("airtemp", "REAL"),
                                       ("tcqtime", "TIMESTAMP")), "tcqtime"),
        Relation("nodes", "table", (("node", "INT"), ("room", "TEXT"))),
        Relation("hot_rooms", "window", (("room", "TEXT"), ("avg", "DOUBLE"))),
    ]:
        cat.add(rel)
    return cat
