"""SQLAlchemy (psycopg 3 driver): the inspector's catalog queries and a plain session."""
import sqlalchemy as sa


def test_inspector(server, table_name):
    engine = sa.create_engine(f"postgresql+psycopg://cq@127.0.0.1:{server.port}/cq")
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table_name} (id INT PRIMARY KEY, "
                             "name VARCHAR NOT NULL, score DOUBLE PRECISION)"))
        conn.execute(sa.text(f"INSERT INTO {table_name} VALUES (1, 'a', 0.5), (2, 'b', NULL)"))
    insp = sa.inspect(engine)
    assert table_name in insp.get_table_names()
    cols = {c["name"]: c for c in insp.get_columns(table_name)}
    assert list(cols) == ["id", "name", "score"]
    assert isinstance(cols["id"]["type"], sa.Integer) and not cols["id"]["nullable"]
    assert not cols["name"]["nullable"]
    assert isinstance(cols["score"]["type"], sa.Float)
    assert insp.get_pk_constraint(table_name)["constrained_columns"] == ["id"]
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT id, name FROM {table_name} WHERE id > :x "
                                    "ORDER BY id"), {"x": 0}).all()
    assert rows == [(1, "a"), (2, "b")]
    engine.dispose()
