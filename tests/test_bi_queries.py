"""What BI tools and drivers send on connect and while browsing (Metabase, DBeaver, Grafana and
the catalog functions they use), each answered with a sensible result. VARCHAR columns are
reported as text: DuckDB keeps no distinction between the two."""
import psycopg
import pytest

QUERIES = [
    ("SELECT version()", lambda r: r[0][0].startswith("PostgreSQL 15.")),
    ("SELECT pg_catalog.version()", lambda r: "cqgate" in r[0][0]),
    ("SELECT current_schema()", lambda r: r == [("public",)]),
    ("SELECT current_database()", lambda r: r == [("cqgate",)]),
    ("SELECT current_setting('server_version_num')::int / 100", lambda r: r == [(1500,)]),
    ("SELECT current_setting('standard_conforming_strings')", lambda r: r == [("on",)]),
    ("SHOW transaction isolation level", lambda r: r == [("read committed",)]),
    ("SELECT db.oid, db.datname FROM pg_catalog.pg_database db WHERE datallowconn "
     "AND NOT datistemplate OR db.datname = 'x'", lambda r: [x[1] for x in r] == ["cqgate"]),
    ("SELECT setting FROM pg_catalog.pg_settings WHERE name = 'standard_conforming_strings'",
     lambda r: r == [("on",)]),
    ("SELECT c.relname, obj_description(c.oid, 'pg_class') FROM pg_catalog.pg_class c "
     "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN "
     "('r','p','v','m','f') AND n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' "
     "AND has_table_privilege(c.oid, 'SELECT') AND c.relname = 'bi_items'",
     lambda r: r == [("bi_items", "bi table")]),
    ("SELECT 'bi_items'::regclass::oid = c.oid FROM pg_class c WHERE c.relname = 'bi_items'",
     lambda r: r == [(True,)]),
    ("SELECT 'int4'::regtype::oid, to_regtype('text')::oid, 'int8'::regtype::text",
     lambda r: r == [(23, 25, "bigint")]),
    ("SELECT a.attname, format_type(a.atttypid, a.atttypmod), col_description(a.attrelid, "
     "a.attnum), pg_get_expr(d.adbin, d.adrelid), pg_get_expr(d.adbin, d.adrelid, true) "
     "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND "
     "d.adnum = a.attnum WHERE a.attrelid = 'bi_items'::regclass AND a.attnum > 0 ORDER BY a.attnum",
     lambda r: r == [("id", "integer", None, None, None),
                     ("label", "text", "the label", "'none'", "'none'"),
                     ("amount", "numeric(12,3)", None, None, None)]),
    ("SELECT pg_get_userbyid(c.relowner), pg_get_constraintdef(con.oid) FROM pg_class c "
     "JOIN pg_constraint con ON con.conrelid = c.oid WHERE c.relname = 'bi_items'",
     lambda r: r == [("cq", "PRIMARY KEY (id)")]),
    ("SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c "
     "ON c.oid = i.indrelid WHERE c.relname = 'bi_items'",
     lambda r: r == [("CREATE UNIQUE INDEX bi_items_pkey ON public.bi_items USING btree (id)",)]),
    ("SELECT n.nspname FROM pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.~) '^pub' "
     "COLLATE pg_catalog.default", lambda r: r == [("public",)]),
    ("SELECT (information_schema._pg_expandarray(ARRAY[10, 20])).n",
     lambda r: r == [(1,), (2,)]),
    ("SELECT table_name FROM information_schema.tables WHERE table_name = 'bi_items'",
     lambda r: r == [("bi_items",)]),
    ("SELECT t.typname FROM pg_catalog.pg_type t LEFT OUTER JOIN pg_catalog.pg_type et "
     "ON et.oid = t.typelem LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid = t.typrelid "
     "WHERE t.typname IS NOT NULL AND (c.relkind IS NULL OR c.relkind = 'c') "
     "AND t.typname = 'uuid'", lambda r: r == [("uuid",)]),
    # unqualified columns that share a name with the catalog's own columns (oid)
    ("SELECT oid::regclass::text FROM pg_class WHERE relname = 'bi_items'",
     lambda r: r == [("bi_items",)]),
    ("SELECT format_type(oid, NULL) FROM pg_type WHERE typname = 'int8'",
     lambda r: r == [("bigint",)]),
    ("SELECT set_config('application_name', 'grafana', false), "
     "current_setting('application_name')", lambda r: r[0][0] == "grafana"),
]


@pytest.fixture(scope="module")
def bi_table(server):
    name = "bi_items"
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, label VARCHAR DEFAULT 'none', "
                  "amount DECIMAL(12,3))")
        c.execute(f"COMMENT ON TABLE {name} IS 'bi table'")
        c.execute(f"COMMENT ON COLUMN {name}.label IS 'the label'")
    return name


@pytest.mark.parametrize("sql,check", QUERIES, ids=[q[0][:50] for q in QUERIES])
def test_bi_query(server, bi_table, sql, check):
    with psycopg.connect(server.dsn, autocommit=True) as c:
        rows = c.execute(sql).fetchall()
    assert check(rows), rows
