"""A pg_catalog that answers what psql, pgjdbc, psqlODBC, asyncpg, psycopg and SQLAlchemy ask.

It is a DuckDB file written at start and attached read-only as ``pgcat``, so no client can change
it: views over DuckDB's own metadata functions (always current, transaction-consistent), static
tables for types, empty tables with the right columns for features cqgate does not have
(policies, publications, inheritance), and macros for the pg_* functions. What changes while the
server runs (streams and windows, roles, owners and privileges, sessions, the system views) the
views read from live tables each session registers on its own connection (``LIVE_TABLES``).
The SQL translator (``gateway/tables/translate.py``) points catalog names at this database.
"""
from __future__ import annotations

import os

import duckdb

from dialect.names import TYPE_ALIASES

from gateway.pgwire.types import TYPES, type_oid_case_sql

CATALOG = "pgcat"
SERVER_VERSION = "15.18"

# pg_catalog relations with their PostgreSQL OIDs (so 'pg_class'::regclass works).
SYSTEM_RELATIONS = {
    "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259,
    "pg_database": 1262, "pg_namespace": 2615, "pg_constraint": 2606, "pg_description": 2609,
    "pg_index": 2610, "pg_attrdef": 2604, "pg_am": 2601, "pg_roles": 11700,
    "pg_settings": 11760,
}

# Tables clients query for features cqgate does not have: present, with PostgreSQL's columns,
# and empty.
# Catalog OIDs are UINTEGER (PostgreSQL's oid is an unsigned 4-byte integer): the wire then
# reports them as oid and oid[], which drivers such as asyncpg require of catalog queries.
OID = "UINTEGER"

# Tables clients query for features cqgate does not have: present, with PostgreSQL's columns,
# and empty.
EMPTY_TABLES = {
    "pg_inherits": "inhrelid UINTEGER, inhparent UINTEGER, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_policy": "oid UINTEGER, polname VARCHAR, polrelid UINTEGER, polcmd VARCHAR, "
                 "polpermissive BOOLEAN, polroles UINTEGER[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_statistic_ext": "oid UINTEGER, stxrelid UINTEGER, stxname VARCHAR, stxnamespace UINTEGER, "
                        "stxowner UINTEGER, stxstattarget INTEGER, stxkeys SMALLINT[], "
                        "stxkind VARCHAR[], stxexprs VARCHAR",
    "pg_publication": "oid UINTEGER, pubname VARCHAR, pubowner UINTEGER, puballtables BOOLEAN, "
                      "pubinsert BOOLEAN, pubupdate BOOLEAN, pubdelete BOOLEAN, "
                      "pubtruncate BOOLEAN, pubviaroot BOOLEAN",
    "pg_publication_namespace": "oid UINTEGER, pnpubid UINTEGER, pnnspid UINTEGER",
    "pg_publication_rel": "oid UINTEGER, prpubid UINTEGER, prrelid UINTEGER, prqual VARCHAR, "
                          "prattrs SMALLINT[]",
    "pg_range": "rngtypid UINTEGER, rngsubtype UINTEGER, rngmultitypid UINTEGER, "
                "rngcollation UINTEGER, rngsubopc UINTEGER, rngcanonical VARCHAR, rngsubdiff VARCHAR",
    "pg_enum": "oid UINTEGER, enumtypid UINTEGER, enumsortorder FLOAT, enumlabel VARCHAR",
    "pg_trigger": "oid UINTEGER, tgrelid UINTEGER, tgparentid UINTEGER, tgname VARCHAR, tgfoid UINTEGER, "
                  "tgtype SMALLINT, tgenabled VARCHAR, tgisinternal BOOLEAN, "
                  "tgconstraint UINTEGER, tableoid UINTEGER",
    "pg_rewrite": "oid UINTEGER, rulename VARCHAR, ev_class UINTEGER, ev_type VARCHAR, "
                  "ev_enabled VARCHAR, is_instead BOOLEAN, tableoid UINTEGER",
    "pg_rules": "schemaname VARCHAR, tablename VARCHAR, rulename VARCHAR, definition VARCHAR",
    "pg_opclass": "oid UINTEGER, opcmethod UINTEGER, opcname VARCHAR, opcnamespace UINTEGER, "
                  "opcowner UINTEGER, opcfamily UINTEGER, opcintype UINTEGER, opcdefault BOOLEAN, "
                  "opckeytype UINTEGER, tableoid UINTEGER",
    "pg_opfamily": "oid UINTEGER, opfmethod UINTEGER, opfname VARCHAR, opfnamespace UINTEGER, "
                   "opfowner UINTEGER, tableoid UINTEGER",
    "pg_conversion": "oid UINTEGER, conname VARCHAR, connamespace UINTEGER, conowner UINTEGER, "
                     "conforencoding INTEGER, contoencoding INTEGER, conproc VARCHAR, "
                     "condefault BOOLEAN",
    "pg_user_mappings": "umid UINTEGER, srvid UINTEGER, srvname VARCHAR, umuser UINTEGER, "
                        "usename VARCHAR, umoptions VARCHAR[]",
    "pg_largeobject_metadata": "oid UINTEGER, lomowner UINTEGER, lomacl VARCHAR[]",
    "pg_ts_dict": "oid UINTEGER, dictname VARCHAR, dictnamespace UINTEGER, dictowner UINTEGER, "
                  "dicttemplate UINTEGER, dictinitoption VARCHAR",
    "pg_ts_parser": "oid UINTEGER, prsname VARCHAR, prsnamespace UINTEGER, prsstart VARCHAR, "
                    "prstoken VARCHAR, prsend VARCHAR, prsheadline VARCHAR, prslextype VARCHAR",
    "pg_ts_template": "oid UINTEGER, tmplname VARCHAR, tmplnamespace UINTEGER, "
                      "tmplinit VARCHAR, tmpllexize VARCHAR",
    "pg_sequence": "seqrelid UINTEGER, seqtypid UINTEGER, seqstart BIGINT, seqincrement BIGINT, "
                   "seqmax BIGINT, seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
    "pg_depend": "classid UINTEGER, objid UINTEGER, objsubid INTEGER, refclassid UINTEGER, "
                 "refobjid UINTEGER, refobjsubid INTEGER, deptype VARCHAR",
    "pg_extension": "oid UINTEGER, extname VARCHAR, extowner UINTEGER, extnamespace UINTEGER, "
                    "extrelocatable BOOLEAN, extversion VARCHAR",
    "pg_foreign_table": "ftrelid UINTEGER, ftserver UINTEGER, ftoptions VARCHAR[]",
    "pg_partitioned_table": "partrelid UINTEGER, partstrat VARCHAR, partnatts SMALLINT",
    "pg_event_trigger": "oid UINTEGER, evtname VARCHAR, evtevent VARCHAR, evtowner UINTEGER, "
                        "evtfoid UINTEGER, evtenabled VARCHAR, evttags VARCHAR[]",
    "pg_shdescription": "objoid UINTEGER, classoid UINTEGER, description VARCHAR",
    "pg_foreign_data_wrapper": "oid UINTEGER, fdwname VARCHAR, fdwowner UINTEGER, "
                               "fdwhandler UINTEGER, fdwvalidator UINTEGER, fdwacl VARCHAR[], "
                               "fdwoptions VARCHAR[]",
    "pg_foreign_server": "oid UINTEGER, srvname VARCHAR, srvowner UINTEGER, srvfdw UINTEGER",
    "pg_cast": "oid UINTEGER, castsource UINTEGER, casttarget UINTEGER, castfunc UINTEGER, "
               "castcontext VARCHAR, castmethod VARCHAR",
    "pg_operator": "oid UINTEGER, oprname VARCHAR, oprnamespace UINTEGER, oprleft UINTEGER, "
                   "oprright UINTEGER, oprresult UINTEGER, oprkind VARCHAR, oprcode VARCHAR, "
                   "oprowner UINTEGER, oprcom UINTEGER, oprnegate UINTEGER",
    "pg_aggregate": "aggfnoid UINTEGER, aggkind VARCHAR",
    "pg_language": "oid UINTEGER, lanname VARCHAR, lanowner UINTEGER, lanispl BOOLEAN, "
                   "lanpltrusted BOOLEAN, lanplcallfoid UINTEGER, laninline UINTEGER, "
                   "lanvalidator UINTEGER, lanacl VARCHAR[], tableoid UINTEGER",
    "pg_collation": "oid UINTEGER, collname VARCHAR, collnamespace UINTEGER, collowner UINTEGER, "
                    "collprovider VARCHAR, collencoding INTEGER, collcollate VARCHAR, "
                    "collctype VARCHAR, colliculocale VARCHAR, collicurules VARCHAR, "
                    "collisdeterministic BOOLEAN, collversion VARCHAR",
    "pg_tablespace": "oid UINTEGER, spcname VARCHAR, spcowner UINTEGER, spcacl VARCHAR[], "
                     "spcoptions VARCHAR[]",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, "
                   "definition VARCHAR",
    "pg_locks": "locktype VARCHAR, relation UINTEGER, pid INTEGER, mode VARCHAR, granted BOOLEAN",
    "pg_timezone_names": "name VARCHAR, abbrev VARCHAR, utc_offset INTERVAL, is_dst BOOLEAN",
    "pg_available_extensions": "name VARCHAR, default_version VARCHAR, "
                               "installed_version VARCHAR, comment VARCHAR",
    "pg_stat_user_tables": f"relid {OID}, schemaname VARCHAR, relname VARCHAR, seq_scan BIGINT, "
                           "seq_tup_read BIGINT, idx_scan BIGINT, idx_tup_fetch BIGINT, "
                           "n_tup_ins BIGINT, n_tup_upd BIGINT, n_tup_del BIGINT, "
                           "n_live_tup BIGINT, n_dead_tup BIGINT, last_vacuum TIMESTAMPTZ, "
                           "last_autovacuum TIMESTAMPTZ, last_analyze TIMESTAMPTZ, "
                           "last_autoanalyze TIMESTAMPTZ",
    "pg_default_acl": f"oid {OID}, defaclrole {OID}, defaclnamespace {OID}, "
                      "defaclobjtype VARCHAR, defaclacl VARCHAR[]",
    "pg_db_role_setting": f"setdatabase {OID}, setrole {OID}, setconfig VARCHAR[]",
    "pg_ts_config": f"oid {OID}, cfgname VARCHAR, cfgnamespace {OID}, cfgowner {OID}, "
                    f"cfgparser {OID}",
    "pg_subscription": f"oid {OID}, subdbid {OID}, subname VARCHAR, subowner {OID}, "
                       "subenabled BOOLEAN, subbinary BOOLEAN, substream VARCHAR, "
                       "subtwophasestate VARCHAR, subdisableonerr BOOLEAN, "
                       "subsynccommit VARCHAR, subconninfo VARCHAR, subslotname VARCHAR, "
                       "subpublications VARCHAR[], suborigin VARCHAR",
    # what set-returning functions return where cqgate has nothing (the translator points a
    # call in FROM at these): no partitions, no extensions to install
    "cq_partition_ancestors": f"relid {OID}, depth BIGINT",
    "cq_available_extensions": "name VARCHAR, default_version VARCHAR, comment VARCHAR",
}
# set-returning pg functions called in FROM -> the catalog relation that answers them
TABLE_FUNCTIONS = {"pg_partition_ancestors": "cq_partition_ancestors",
                   "pg_available_extensions": "cq_available_extensions",
                   "pg_get_keywords": "cq_keywords"}

# What changes while the server runs, seen by each session as it is when its statement starts:
# the read-only catalog's views read ``temp.main.<name>``, which every session's connection
# registers (``gateway/system_views/catalog_live.py``), so no client can write what others see.
LIVE_TABLES = {
    # cqgate relations that are not DuckDB tables (streams, windows), from the stream registry
    "cq_relations": f"oid {OID}, nspname VARCHAR, relname VARCHAR, relkind VARCHAR, "
                    "cq_kind VARCHAR, description VARCHAR, definition VARCHAR",
    "cq_columns": f"attrelid {OID}, attname VARCHAR, attnum INTEGER, data_type VARCHAR, "
                  "is_notnull BOOLEAN",
    # roles, memberships and each relation's owner and privileges (gateway/security)
    "cq_roles": f"oid {OID}, rolname VARCHAR, rolsuper BOOLEAN, rolinherit BOOLEAN, "
                "rolcreaterole BOOLEAN, rolcreatedb BOOLEAN, rolcanlogin BOOLEAN, "
                "rolreplication BOOLEAN, rolconnlimit INTEGER, rolpassword VARCHAR, "
                "rolvaliduntil TIMESTAMPTZ, rolbypassrls BOOLEAN, rolconfig VARCHAR[]",
    "cq_auth_members": f"roleid {OID}, member {OID}, grantor {OID}, admin_option BOOLEAN",
    "cq_acl": f"nspname VARCHAR, relname VARCHAR, owner {OID}, acl VARCHAR[]",
    # what the session's own role may do (the privilege functions read these)
    "cq_me": "rolname VARCHAR",
    "cq_my_roles": "rolname VARCHAR",
    "cq_my_privileges": "relid BIGINT, privileges VARCHAR[]",
    "cq_my_schemas": "nspname VARCHAR, privileges VARCHAR[]",
    "pg_stat_activity": f"datid {OID}, datname VARCHAR, pid INTEGER, leader_pid INTEGER, "
                        f"usesysid {OID}, usename VARCHAR, application_name VARCHAR, "
                        "client_addr VARCHAR, client_hostname VARCHAR, client_port INTEGER, "
                        "backend_start TIMESTAMPTZ, xact_start TIMESTAMPTZ, "
                        "query_start TIMESTAMPTZ, state_change TIMESTAMPTZ, "
                        "wait_event_type VARCHAR, wait_event VARCHAR, state VARCHAR, "
                        "backend_xid BIGINT, backend_xmin BIGINT, query_id BIGINT, "
                        "query VARCHAR, backend_type VARCHAR",
    # cqgate's system views, from the back end just before a statement reads them
    "cq_queries": "pid INTEGER, name VARCHAR, kind VARCHAR, query VARCHAR, state VARCHAR, "
                  "started TIMESTAMPTZ, rows_in BIGINT, rows_out BIGINT, state_size BIGINT, "
                  "last_emit TIMESTAMPTZ, error VARCHAR, unread_rows BIGINT, "
                  "memory_bytes BIGINT, spill_bytes BIGINT, engine VARCHAR, "
                  "progress TIMESTAMP, recoveries BIGINT, checkpoint TIMESTAMP",
    "cq_joins": "pid INTEGER, name VARCHAR, query VARCHAR, recall_target DOUBLE, "
                "recall_estimate DOUBLE, delay_left INTERVAL, delay_right INTERVAL, "
                "buffered_left BIGINT, buffered_right BIGINT, results BIGINT, "
                "late_left BIGINT, late_right BIGINT, adaptations BIGINT, held BIGINT",
    "cq_streams": "stream VARCHAR, tuples BIGINT, rate DOUBLE, watermark TIMESTAMP, "
                  "late BIGINT, errors BIGINT, dropped BIGINT, slack INTERVAL, "
                  "heartbeat INTERVAL, watermark_follows VARCHAR",
    "cq_sources": "source VARCHAR, stream VARCHAR, kind VARCHAR, upstream VARCHAR, slot VARCHAR, "
                  "state VARCHAR, rows BIGINT, lag_bytes BIGINT, lag_seconds DOUBLE, "
                  "confirmed_lsn VARCHAR, errors BIGINT, last_error VARCHAR, "
                  "since TIMESTAMPTZ",
    "cq_sinks": "sink VARCHAR, kind VARCHAR, target VARCHAR, mode VARCHAR, state VARCHAR, "
                "rows BIGINT, watermark TIMESTAMP, errors BIGINT, last_error VARCHAR, "
                "since TIMESTAMPTZ",
    # the clearinghouse's logs (gateway/clearinghouse/ingest_log.py)
    "cq_ingest_errors": "stream VARCHAR, source VARCHAR, line BIGINT, reason VARCHAR, "
                        "text VARCHAR, logged TIMESTAMPTZ",
    "cq_late_tuples": "stream VARCHAR, event_time TIMESTAMP, watermark TIMESTAMP, "
                      "arrived TIMESTAMPTZ, source VARCHAR, tuple VARCHAR",
    "cq_shed": "stream VARCHAR, second TIMESTAMP, policy VARCHAR, dropped BIGINT, kept BIGINT",
}
# information_schema views shown for the client's database only: name -> (catalog, schema column)
INFORMATION_SCHEMA = {
    "tables": ("table_catalog", "table_schema"), "columns": ("table_catalog", "table_schema"),
    "views": ("table_catalog", "table_schema"), "schemata": ("catalog_name", "schema_name"),
    "table_constraints": ("constraint_catalog", "constraint_schema"),
    "key_column_usage": ("constraint_catalog", "constraint_schema"),
    "referential_constraints": ("constraint_catalog", "constraint_schema"),
    "check_constraints": ("constraint_catalog", "constraint_schema"),
    "constraint_column_usage": ("table_catalog", "table_schema")}
# the live tables only the catalog's own views read
INTERNAL_LIVE = ("cq_relations", "cq_columns", "cq_roles", "cq_auth_members", "cq_acl",
                 "cq_me", "cq_my_roles", "cq_my_privileges", "cq_my_schemas")

# duckdb_indexes().expressions is a list's text, ['"name"', x, '(lower(y))']: its items, an
# item in quotes holding commas of its own
_INDEX_KEYS = ("regexp_extract_all(trim(expressions, '[]'), "
               "'''(?:[^'']|'''')*''|[^, ][^,]*')")

# Views and static tables this module defines; the translator redirects these names.
RELATIONS = set(EMPTY_TABLES) | (set(LIVE_TABLES) - set(INTERNAL_LIVE)) | {
    "pg_namespace", "pg_class", "pg_attribute", "pg_attrdef", "pg_type", "pg_constraint",
    "pg_index", "pg_database", "pg_roles", "pg_user", "pg_authid", "pg_am", "pg_proc",
    "pg_description", "pg_settings", "pg_tables", "pg_views", "pg_indexes",
    "pg_auth_members",
}


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# types whose I/O functions PostgreSQL names with an underscore (timestamp_recv, not
# timestamprecv): drivers such as ADBC pick a column's decoder by its typreceive name
_UNDERSCORED = {"timestamp", "timestamptz", "date", "time", "timetz", "numeric", "interval",
                "uuid", "json", "jsonb", "xml", "bit", "varbit", "record", "void"}
_IO_PREFIX = {"money": "cash_"}


def _io_functions(t) -> tuple:
    """pg_type's typinput, typoutput, typreceive and typsend for ``t``, as PostgreSQL names
    them."""
    if t.category == "A" and t.elem_oid and t.name.startswith("_"):
        return "array_in", "array_out", "array_recv", "array_send"
    prefix = _IO_PREFIX.get(t.name) or (t.name + "_" if t.name in _UNDERSCORED else t.name)
    return tuple(prefix + suffix for suffix in ("in", "out", "recv", "send"))


def build(path: str, db: str, settings: dict | None = None) -> dict:
    """Write the catalog database to ``path`` (anew), for the server to attach read-only; the
    Arrow schema of each live table, which sessions register on their connections."""
    for stale in (path, path + ".wal"):
        if os.path.exists(stale):
            os.remove(stale)
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{path}' AS {CATALOG}")
        for name, cols in LIVE_TABLES.items():
            con.execute(f"CREATE TEMP TABLE {name} ({cols})")
        for stmt in setup_sql(db, settings):
            con.execute(stmt)
        schemas = {name: con.sql(f"SELECT * FROM temp.main.{name}").to_arrow_table().schema
                   for name in LIVE_TABLES}
        con.execute(f"DETACH {CATALOG}")
    finally:
        con.close()
    return schemas


def setup_sql(db: str, settings: dict | None = None, hidden_schemas=("main",)) -> list[str]:
    """The statements that build the ``pgcat`` database (attached as ``pgcat``) for the DuckDB
    catalog ``db``; ``settings`` (name -> default) fill pg_settings. The live tables must exist
    as ``temp.main.<name>`` on the connection that runs them, so the views bind."""
    c = f"{CATALOG}.main"
    hidden = ", ".join(_q(s) for s in hidden_schemas)
    out = [f"CREATE TABLE {c}.{name} ({cols})" for name, cols in EMPTY_TABLES.items()]
    out += [f"CREATE VIEW {c}.{name} AS SELECT * FROM temp.main.{name}" for name in LIVE_TABLES]

    # A namespace's OID is DuckDB's schema OID (public keeps PostgreSQL's 2200). No lookup by
    # name inside the macro: a subquery there would bind the caller's schema_name to itself.
    out.append(f"""CREATE MACRO {c}.cq_nsp_oid(name, duck_oid) AS CASE name
        WHEN 'pg_catalog' THEN 11 WHEN 'information_schema' THEN 13183 WHEN 'public' THEN 2200
        ELSE duck_oid END::{OID}""")
    out.append(f"CREATE MACRO {c}.cq_type_oid(dt) AS ({type_oid_case_sql('dt')})::{OID}")

    # --- pg_type: generated from the one type registry
    rows = []
    for t in TYPES:
        typtype = "p" if t.category in ("P", "X") else "b"
        inp, outp, recv, send = _io_functions(t)
        coll = 100 if t.category == "S" else 0
        rows.append(f"({t.oid}, {_q(t.name)}, 11, 10, {t.typlen}, {str(t.typlen in (1, 2, 4, 8)).lower()},"
                    f" {_q(typtype)}, {_q(t.category)}, false, true, ',', 0, {t.elem_oid}, {t.array_oid},"
                    f" {_q(inp)}, {_q(outp)}, {_q(recv)}, {_q(send)},"
                    f" 'i', 'p', false, 0, -1, 0, {coll}, {_q(t.sql_name)})")
    out.append(f"""CREATE TABLE {c}.pg_type (oid {OID}, typname VARCHAR, typnamespace {OID},
        typowner {OID}, typlen SMALLINT, typbyval BOOLEAN, typtype VARCHAR, typcategory VARCHAR,
        typispreferred BOOLEAN, typisdefined BOOLEAN, typdelim VARCHAR, typrelid {OID},
        typelem {OID}, typarray {OID}, typinput VARCHAR, typoutput VARCHAR, typreceive VARCHAR,
        typsend VARCHAR, typalign VARCHAR, typstorage VARCHAR, typnotnull BOOLEAN,
        typbasetype {OID}, typtypmod INTEGER, typndims INTEGER, typcollation {OID},
        cq_format VARCHAR)""")
    out.append(f"INSERT INTO {c}.pg_type VALUES " + ", ".join(rows))
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typdefault VARCHAR""")
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typdefaultbin VARCHAR""")
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typacl VARCHAR[]""")
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typsubscript VARCHAR""")
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typmodin VARCHAR""")
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typmodout VARCHAR""")
    out.append(f"""ALTER TABLE {c}.pg_type ADD COLUMN typanalyze VARCHAR""")

    out.append(f"""CREATE TABLE {c}.pg_am AS SELECT * FROM (VALUES
        (2::{OID}, 'heap', 'heap_tableam_handler', 't'),
        (403::{OID}, 'btree', 'bthandler', 'i')) v(oid, amname, amhandler, amtype)""")
    out.append(f"CREATE VIEW {c}.pg_roles AS SELECT * FROM {c}.cq_roles")
    out.append(f"CREATE VIEW {c}.pg_auth_members AS SELECT * FROM {c}.cq_auth_members")
    out.append(f"CREATE VIEW {c}.pg_authid AS SELECT * FROM {c}.pg_roles")
    out.append(f"""CREATE VIEW {c}.pg_user AS SELECT rolname AS usename, oid AS usesysid,
        rolcreatedb AS usecreatedb, rolsuper AS usesuper, false AS userepl, true AS usebypassrls,
        '********' AS passwd, rolvaliduntil AS valuntil, rolconfig AS useconfig
        FROM {c}.pg_roles WHERE rolcanlogin""")
    out.append(f"""CREATE TABLE {c}.pg_database AS SELECT 16384::{OID} AS oid, {_q(db)} AS datname,
        10::{OID} AS datdba, 6 AS encoding, 'c' AS datlocprovider, false AS datistemplate,
        true AS datallowconn, -1 AS datconnlimit, 'C.UTF-8' AS datcollate,
        'C.UTF-8' AS datctype, NULL::VARCHAR AS daticulocale, NULL::VARCHAR AS datcollversion,
        NULL::VARCHAR[] AS datacl, 1663::{OID} AS dattablespace""")

    # --- namespaces
    out.append(f"""CREATE VIEW {c}.pg_namespace AS
        SELECT 11::{OID} AS oid, 'pg_catalog' AS nspname, 10::{OID} AS nspowner,
               NULL::VARCHAR[] AS nspacl
        UNION ALL SELECT 13183, 'information_schema', 10, NULL
        UNION ALL SELECT {c}.cq_nsp_oid(schema_name, oid), schema_name, 10, NULL
          FROM duckdb_schemas() WHERE database_name = {_q(db)}
           AND schema_name NOT IN ({hidden}, 'pg_catalog', 'information_schema')""")

    # --- indexes: those behind primary keys and unique constraints, and CREATE [UNIQUE] INDEX
    # ones (duckdb_indexes() gives their key as expression text: a plain column's name gives
    # its attnum, an expression 0, as pg_index.indkey has it)
    # the indexes without their keys' names: what pg_class needs, without reading columns
    out.append(f"""CREATE VIEW {c}.cq_index_list AS
        SELECT (4000000 + table_oid * 64 + constraint_index)::{OID} AS indexrelid,
            schema_name, schema_oid,
            CASE constraint_type WHEN 'PRIMARY KEY' THEN table_name || '_pkey'
                 ELSE constraint_name END AS relname, len(constraint_column_indexes) AS nkeys
        FROM duckdb_constraints()
        WHERE database_name = {_q(db)} AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')
          AND schema_name NOT IN ({hidden})
        UNION ALL
        SELECT index_oid::{OID}, schema_name, schema_oid, index_name,
               len({_INDEX_KEYS})
        FROM duckdb_indexes()
        WHERE database_name = {_q(db)} AND schema_name NOT IN ({hidden})""")
    out.append(f"""CREATE VIEW {c}.cq_indexes AS
        SELECT (4000000 + table_oid * 64 + constraint_index)::{OID} AS indexrelid,
            table_oid::{OID} AS indrelid, schema_name, schema_oid, table_name,
            CASE constraint_type WHEN 'PRIMARY KEY' THEN table_name || '_pkey'
                 ELSE constraint_name END AS relname,
            true AS is_unique, constraint_type = 'PRIMARY KEY' AS is_primary,
            list_transform(constraint_column_indexes, lambda i: (i + 1)::SMALLINT) AS indkey,
            constraint_column_names AS colnames
        FROM duckdb_constraints()
        WHERE database_name = {_q(db)} AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')
          AND schema_name NOT IN ({hidden})
        UNION ALL
        SELECT e.index_oid::{OID}, e.table_oid::{OID}, e.schema_name, e.schema_oid, e.table_name,
            e.index_name, e.is_unique, e.is_primary,
            list(coalesce(col.column_index, 0)::SMALLINT ORDER BY e.k),
            list(coalesce(col.column_name, e.expr) ORDER BY e.k)
        FROM (SELECT *, unnest(parts) AS expr, generate_subscripts(parts, 1) AS k
              FROM (SELECT *, {_INDEX_KEYS} AS parts
                    FROM duckdb_indexes()
                    WHERE database_name = {_q(db)} AND schema_name NOT IN ({hidden}))) e
        LEFT JOIN duckdb_columns() col ON col.database_name = {_q(db)}
             AND col.table_oid = e.table_oid
             AND col.column_name = replace(trim(trim(e.expr, ''''), '"'), '""', '"')
        GROUP BY ALL""")

    # --- relations
    rel_cols = """({oid})::{OID} AS oid, {name} AS relname, ({nsp})::{OID} AS relnamespace,
        0::{OID} AS reltype,
        0::{OID} AS reloftype, 10::{OID} AS relowner, {am}::{OID} AS relam,
        0::{OID} AS relfilenode, 0::{OID} AS reltablespace, 0 AS relpages,
        {tuples}::FLOAT AS reltuples, 0 AS relallvisible, 0::{OID} AS reltoastrelid,
        {hasindex} AS relhasindex, false AS relisshared, 'p' AS relpersistence,
        {kind} AS relkind, {natts}::SMALLINT AS relnatts, 0::SMALLINT AS relchecks,
        false AS relhasrules, {triggers} AS relhastriggers, false AS relhassubclass,
        false AS relrowsecurity, false AS relforcerowsecurity, true AS relispopulated,
        'd' AS relreplident, false AS relispartition, 0::{OID} AS relrewrite,
        0::BIGINT AS relfrozenxid, 0::BIGINT AS relminmxid, NULL::VARCHAR[] AS relacl,
        NULL::VARCHAR[] AS reloptions, NULL::VARCHAR AS relpartbound,
        {nspname} AS cq_nspname""".replace("{OID}", OID)
    tables = rel_cols.format(oid="table_oid", name="table_name", nsp=f"{c}.cq_nsp_oid(schema_name, schema_oid)",
                             am=2, tuples="estimated_size",
                             hasindex="has_primary_key OR index_count > 0 OR dt.table_oid IN "
                                      "(SELECT table_oid FROM duckdb_constraints() "
                                      "WHERE constraint_type = 'UNIQUE')",
                             # a foreign key is kept by triggers on both its tables
                             triggers="dt.table_oid IN (SELECT table_oid FROM "
                                      "duckdb_constraints() WHERE constraint_type = "
                                      "'FOREIGN KEY') OR (dt.schema_name, dt.table_name) IN "
                                      "(SELECT (schema_name, referenced_table) FROM "
                                      "duckdb_constraints() WHERE constraint_type = "
                                      "'FOREIGN KEY')",
                             kind="'r'", natts="column_count", nspname="schema_name")
    views = rel_cols.format(oid="view_oid", name="view_name", nsp=f"{c}.cq_nsp_oid(schema_name, schema_oid)",
                            am=0, tuples=0, hasindex="false", triggers="false", kind="'v'",
                            natts="column_count",
                            nspname="schema_name")
    indexes = rel_cols.format(oid="indexrelid", name="relname",
                              nsp=f"{c}.cq_nsp_oid(schema_name, schema_oid)", am=403,
                              tuples=0, hasindex="false", triggers="false", kind="'i'",
                              natts="nkeys", nspname="schema_name")
    system = rel_cols.format(oid="v.oid", name="v.name", nsp=11, am=2, tuples=0,
                             hasindex="false", triggers="false", kind="'r'", natts=0,
                             nspname="'pg_catalog'")
    cqrels = rel_cols.format(oid="r.oid", name="relname",
                             nsp=f"{c}.cq_nsp_oid(r.nspname, ds.oid)", am=0,
                             tuples=0, hasindex="false", triggers="false", kind="relkind",
                             natts=f"(SELECT count(*) FROM {c}.cq_columns cc WHERE cc.attrelid = r.oid)",
                             nspname="r.nspname")
    sysvals = ", ".join(f"({oid}, {_q(n)})" for n, oid in SYSTEM_RELATIONS.items())
    out.append(f"""CREATE VIEW {c}.cq_class AS
        SELECT {tables} FROM duckdb_tables() dt
          WHERE database_name = {_q(db)} AND schema_name NOT IN ({hidden})
        UNION ALL SELECT {views} FROM duckdb_views()
          WHERE database_name = {_q(db)} AND NOT internal AND schema_name NOT IN ({hidden})
        UNION ALL SELECT {indexes} FROM {c}.cq_index_list
        UNION ALL SELECT {system} FROM (VALUES {sysvals}) v(oid, name)
        UNION ALL SELECT {cqrels} FROM {c}.cq_relations r
          LEFT JOIN duckdb_schemas() ds ON ds.database_name = {_q(db)}
           AND ds.schema_name = r.nspname""")
    # owners and privileges of tables, streams, windows, views (gateway/security/privileges.py)
    out.append(f"""CREATE VIEW {c}.pg_class AS
        SELECT b.* EXCLUDE (cq_nspname) REPLACE (coalesce(a.owner, 10)::{OID} AS relowner,
                                                 a.acl AS relacl)
        FROM {c}.cq_class b LEFT JOIN {c}.cq_acl a
          ON b.relkind IN ('r', 'v', 'm', 'p', 'f') AND a.nspname = b.cq_nspname
         AND a.relname = lower(b.relname)""")

    # --- columns
    out.append(f"""CREATE VIEW {c}.pg_attribute AS
        SELECT coalesce(t.table_oid, v.view_oid)::{OID} AS attrelid, col.column_name AS attname,
            {c}.cq_type_oid(col.data_type) AS atttypid, -1 AS attstattarget,
            (SELECT typlen FROM {c}.pg_type WHERE oid = {c}.cq_type_oid(col.data_type)) AS attlen,
            col.column_index::SMALLINT AS attnum,
            CASE WHEN col.data_type LIKE '%[]' THEN 1 ELSE 0 END AS attndims,
            -1 AS attcacheoff,
            CASE WHEN col.data_type LIKE 'DECIMAL(%' THEN
                 ((col.numeric_precision << 16) | col.numeric_scale) + 4 ELSE -1 END AS atttypmod,
            false AS attbyval, 'i' AS attalign, 'p' AS attstorage, '' AS attcompression,
            NOT col.is_nullable AS attnotnull, col.column_default IS NOT NULL AS atthasdef,
            false AS atthasmissing, '' AS attidentity, '' AS attgenerated,
            false AS attisdropped, true AS attislocal, 0 AS attinhcount,
            CASE WHEN col.data_type = 'VARCHAR' THEN 100 ELSE 0 END::{OID} AS attcollation,
            NULL::VARCHAR[] AS attacl, NULL::VARCHAR[] AS attoptions,
            NULL::VARCHAR[] AS attfdwoptions, col.comment AS cq_comment
        FROM duckdb_columns() col
        LEFT JOIN duckdb_tables() t ON t.database_name = col.database_name
             AND t.schema_name = col.schema_name AND t.table_name = col.table_name
        LEFT JOIN duckdb_views() v ON v.database_name = col.database_name
             AND v.schema_name = col.schema_name AND v.view_name = col.table_name
        WHERE col.database_name = {_q(db)} AND col.schema_name NOT IN ({hidden})
        UNION ALL
        SELECT cc.attrelid, cc.attname, {c}.cq_type_oid(cc.data_type), -1,
            (SELECT typlen FROM {c}.pg_type WHERE oid = {c}.cq_type_oid(cc.data_type)),
            cc.attnum::SMALLINT, 0, -1, -1, false, 'i', 'p', '', cc.is_notnull, false, false, '', '',
            false, true, 0, 0::{OID}, NULL, NULL, NULL, NULL
        FROM {c}.cq_columns cc
        UNION ALL
        -- an index's columns: its key columns' names and types, numbered from 1
        SELECT i.indexrelid, i.name, coalesce(ty.oid, 25::{OID}), -1, ty.typlen,
            i.k::SMALLINT, 0, -1, -1, false, 'i', 'p', '', false, false, false, '', '',
            false, true, 0, 0::{OID}, NULL, NULL, NULL, NULL
        FROM (SELECT indexrelid, indrelid, unnest(indkey) AS key, unnest(colnames) AS name,
                     generate_subscripts(indkey, 1) AS k FROM {c}.cq_indexes) i
        LEFT JOIN duckdb_columns() col ON col.database_name = {_q(db)}
             AND col.table_oid = i.indrelid AND col.column_index = i.key
        LEFT JOIN {c}.pg_type ty ON ty.oid = {c}.cq_type_oid(col.data_type)""")
    out.append(f"""CREATE VIEW {c}.pg_attrdef AS
        SELECT (5000000 + t.table_oid * 1024 + col.column_index)::{OID} AS oid,
               t.table_oid::{OID} AS adrelid,
               col.column_index::SMALLINT AS adnum, col.column_default AS adbin
        FROM duckdb_columns() col JOIN duckdb_tables() t ON t.database_name = col.database_name
             AND t.schema_name = col.schema_name AND t.table_name = col.table_name
        WHERE col.database_name = {_q(db)} AND col.column_default IS NOT NULL""")

    # --- constraints and the indexes behind primary keys / unique constraints
    out.append(f"""CREATE VIEW {c}.pg_constraint AS
        SELECT (4000000 + table_oid * 64 + constraint_index + 2000000000)::{OID} AS oid,
            CASE constraint_type WHEN 'PRIMARY KEY' THEN table_name || '_pkey'
                 WHEN 'FOREIGN KEY' THEN table_name || '_'
                      || array_to_string(constraint_column_names, '_') || '_fkey'
                 ELSE constraint_name END AS conname,
            {c}.cq_nsp_oid(schema_name, schema_oid) AS connamespace,
            CASE constraint_type WHEN 'PRIMARY KEY' THEN 'p' WHEN 'UNIQUE' THEN 'u'
                 WHEN 'CHECK' THEN 'c' WHEN 'FOREIGN KEY' THEN 'f' END AS contype,
            false AS condeferrable, false AS condeferred, true AS convalidated,
            table_oid::{OID} AS conrelid, 0::{OID} AS contypid,
            CASE WHEN constraint_type IN ('PRIMARY KEY', 'UNIQUE')
                 THEN 4000000 + table_oid * 64 + constraint_index
                 -- a foreign key's is the referenced table's key index
                 WHEN constraint_type = 'FOREIGN KEY' THEN coalesce((
                      SELECT min(4000000 + r.table_oid * 64 + r.constraint_index)
                      FROM duckdb_constraints() r
                      WHERE r.database_name = {_q(db)} AND r.table_name = f.referenced_table
                        AND r.schema_name = f.schema_name
                        AND r.constraint_type IN ('PRIMARY KEY', 'UNIQUE')
                        AND r.constraint_column_names = f.referenced_column_names), 0)
                 ELSE 0 END::{OID} AS conindid,
            0::{OID} AS conparentid,
            coalesce((SELECT min(t2.table_oid) FROM duckdb_tables() t2
                      WHERE t2.database_name = {_q(db)} AND t2.table_name = referenced_table
                        AND t2.schema_name = f.schema_name), 0)::{OID}
                AS confrelid,
            'a' AS confupdtype, 'a' AS confdeltype, 's' AS confmatchtype, true AS conislocal,
            0 AS coninhcount, true AS connoinherit,
            list_transform(constraint_column_indexes, lambda i: (i + 1)::SMALLINT) AS conkey,
            CASE WHEN constraint_type = 'FOREIGN KEY' THEN (
                 SELECT list(rc.column_index::SMALLINT ORDER BY k.i)
                 FROM (SELECT unnest(referenced_column_names) AS name,
                              generate_subscripts(referenced_column_names, 1) AS i) k
                 JOIN duckdb_columns() rc ON rc.database_name = {_q(db)}
                  AND rc.schema_name = f.schema_name
                  AND rc.table_name = referenced_table AND rc.column_name = k.name)
                 END AS confkey,
            CASE WHEN constraint_type IN ('PRIMARY KEY', 'UNIQUE') THEN constraint_type || ' ('
                 || array_to_string(constraint_column_names, ', ') || ')'
                 ELSE constraint_text END AS cq_def, NULL::VARCHAR AS conbin,
            2606::{OID} AS tableoid
        FROM duckdb_constraints() f
        WHERE database_name = {_q(db)} AND schema_name NOT IN ({hidden})
          AND constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'CHECK', 'FOREIGN KEY')""")
    out.append(f"""CREATE VIEW {c}.pg_index AS
        SELECT indexrelid, indrelid, len(indkey)::SMALLINT AS indnatts,
            len(indkey)::SMALLINT AS indnkeyatts, is_unique AS indisunique,
            false AS indnullsnotdistinct, is_primary AS indisprimary, false AS indisexclusion,
            true AS indimmediate, false AS indisclustered, true AS indisvalid,
            false AS indcheckxmin, true AS indisready, true AS indislive,
            false AS indisreplident, indkey,
            list_transform(indkey, lambda i: 0::{OID}) AS indcollation,
            list_transform(indkey, lambda i: 0::{OID}) AS indclass,
            list_transform(indkey, lambda i: 0::SMALLINT) AS indoption,
            NULL::VARCHAR AS indexprs, NULL::VARCHAR AS indpred,
            'CREATE ' || CASE WHEN is_unique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' || relname
                 || ' ON ' || schema_name || '.' || table_name || ' USING btree ('
                 || array_to_string(colnames, ', ') || ')' AS cq_indexdef,
            colnames AS cq_colnames
        FROM {c}.cq_indexes""")

    out.append(f"""CREATE VIEW {c}.pg_description AS
        SELECT table_oid::{OID} AS objoid, 1259::{OID} AS classoid, 0 AS objsubid,
               comment AS description
          FROM duckdb_tables() WHERE database_name = {_q(db)} AND comment IS NOT NULL
        UNION ALL SELECT attrelid, 1259, attnum, cq_comment FROM {c}.pg_attribute
          WHERE cq_comment IS NOT NULL
        UNION ALL SELECT oid, 1259, 0, description FROM {c}.cq_relations
          WHERE description IS NOT NULL""")
    out.append(f"""CREATE VIEW {c}.pg_proc AS
        SELECT (100000 + row_number() OVER ())::{OID} AS oid, function_name AS proname,
               11::{OID} AS pronamespace, 10::{OID} AS proowner,
               CASE function_type WHEN 'aggregate' THEN 'a' ELSE 'f' END AS prokind,
               0::{OID} AS prorettype, []::{OID}[] AS proargtypes, false AS proretset,
               0::{OID} AS prolang, '' AS prosrc, 0::SMALLINT AS pronargs,
               0::SMALLINT AS pronargdefaults, NULL::VARCHAR AS proargdefaults,
               NULL::VARCHAR[] AS proargnames,
               NULL::VARCHAR[] AS proargmodes, NULL::{OID}[] AS proallargtypes,
               false AS proisstrict, 'v' AS provolatile, NULL::VARCHAR[] AS proconfig,
               NULL::VARCHAR[] AS proacl
        FROM (SELECT DISTINCT function_name, function_type FROM duckdb_functions()
              WHERE NOT internal AND database_name = {_q(db)})""")
    out.append(f"""CREATE VIEW {c}.cq_keywords AS SELECT keyword_name AS word,
        CASE keyword_category WHEN 'reserved' THEN 'R' WHEN 'unreserved' THEN 'U'
             WHEN 'type_function' THEN 'T' ELSE 'C' END AS catcode,
        true AS barelabel, keyword_category AS catdesc, 'can be bare label' AS baredesc
        FROM duckdb_keywords()""")
    out.append(f"""CREATE TABLE {c}.pg_settings (name VARCHAR, setting VARCHAR, unit VARCHAR,
        category VARCHAR, short_desc VARCHAR, context VARCHAR, vartype VARCHAR,
        source VARCHAR, boot_val VARCHAR, reset_val VARCHAR)""")
    # read-only settings drivers ask for (pgjdbc's getMaxColumnsInIndex and its key queries)
    settings = {"max_index_keys": "32", "max_identifier_length": "63", "block_size": "8192",
                "max_function_args": "100", **(settings or {})}
    if settings:
        out.append(f"INSERT INTO {c}.pg_settings VALUES " + ", ".join(
            f"({_q(k)}, {_q(v)}, NULL, 'cqgate', '', 'user', 'string', 'default', {_q(v)}, "
            f"{_q(v)})" for k, v in settings.items()))
    out.append(f"""CREATE VIEW {c}.pg_indexes AS SELECT n.nspname AS schemaname,
        t.relname AS tablename, i.relname AS indexname, NULL::VARCHAR AS tablespace,
        x.cq_indexdef AS indexdef
        FROM {c}.pg_index x JOIN {c}.pg_class i ON i.oid = x.indexrelid
        JOIN {c}.pg_class t ON t.oid = x.indrelid
        JOIN {c}.pg_namespace n ON n.oid = t.relnamespace
        LEFT JOIN {c}.pg_constraint con ON con.conindid = x.indexrelid""")
    # information_schema as the client's database has it: not the catalog, nor DuckDB's own
    for name, (cat_col, schema_col) in INFORMATION_SCHEMA.items():
        if name in ("tables", "columns"):
            continue                # PostgreSQL's own (below, once the macros exist)
        out.append(f"""CREATE VIEW {c}.cq_is_{name} AS SELECT * FROM information_schema.{name}
            WHERE {cat_col} = {_q(db)} AND {schema_col} NOT IN ({hidden})""")
    out += _macro_sql(c)
    # information_schema.tables and .columns as PostgreSQL fills them: PostgreSQL's type names
    # (data_type, udt_name), and streams (BASE TABLE), named windows and derived streams
    # (VIEW) beside the tables; Grafana and Metabase list and type columns from these
    out.append(f"""CREATE VIEW {c}.cq_is_tables AS
        SELECT * FROM information_schema.tables
          WHERE table_catalog = {_q(db)} AND table_schema NOT IN ({hidden})
        UNION ALL BY NAME
        SELECT {_q(db)} AS table_catalog, nspname AS table_schema, relname AS table_name,
               CASE relkind WHEN 'v' THEN 'VIEW' ELSE 'BASE TABLE' END AS table_type,
               'NO' AS is_insertable_into, 'NO' AS is_typed
          FROM {c}.cq_relations""")
    out.append(f"""CREATE VIEW {c}.cq_is_columns AS
        SELECT * REPLACE ({c}.cq_is_data_type(data_type) AS data_type,
                          'pg_catalog' AS udt_schema, {_q(db)} AS udt_catalog,
                          {c}.cq_udt_name(data_type) AS udt_name,
                          'NO' AS is_identity,
                          coalesce(is_generated, 'NEVER') AS is_generated)
          FROM information_schema.columns
          WHERE table_catalog = {_q(db)} AND table_schema NOT IN ({hidden})
        UNION ALL BY NAME
        SELECT {_q(db)} AS table_catalog, r.nspname AS table_schema, r.relname AS table_name,
               cc.attname AS column_name, cc.attnum AS ordinal_position,
               CASE WHEN cc.is_notnull THEN 'NO' ELSE 'YES' END AS is_nullable,
               {c}.cq_is_data_type(cc.data_type) AS data_type, 'pg_catalog' AS udt_schema,
               {_q(db)} AS udt_catalog, {c}.cq_udt_name(cc.data_type) AS udt_name,
               'NO' AS is_identity, 'NEVER' AS is_generated, 'NO' AS is_updatable
          FROM {c}.cq_columns cc JOIN {c}.cq_relations r ON r.oid = cc.attrelid""")
    # views that call the macros (a macro binds when it is created, a view too)
    out.append(f"""CREATE VIEW {c}.pg_tables AS SELECT n.nspname AS schemaname,
        c.relname AS tablename, {c}.pg_get_userbyid(c.relowner) AS tableowner, NULL::VARCHAR AS tablespace,
        c.relhasindex AS hasindexes, false AS hasrules, false AS hastriggers,
        false AS rowsecurity
        FROM {c}.pg_class c JOIN {c}.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p')""")
    out.append(f"""CREATE VIEW {c}.pg_views AS SELECT schema_name AS schemaname,
        view_name AS viewname, {c}.pg_get_userbyid(coalesce(a.owner, 10)) AS viewowner,
        sql AS definition
        FROM duckdb_views() v LEFT JOIN {c}.cq_acl a
          ON a.nspname = v.schema_name AND a.relname = lower(v.view_name)
        WHERE database_name = {_q(db)} AND NOT internal
        UNION ALL                   -- named windows and derived streams show as views
        SELECT r.nspname, r.relname, {c}.pg_get_userbyid(coalesce(a.owner, 10)), r.definition
        FROM {c}.cq_relations r LEFT JOIN {c}.cq_acl a
          ON a.nspname = r.nspname AND a.relname = lower(r.relname)
        WHERE r.relkind = 'v'""")
    return out


# Types are fixed, so a type name finds its OID in a constant map (no subquery, which a caller
# could not nest in the lambda of another lookup).
_BY_TYPE_NAME = {t.name: t for t in TYPES}
_TYPE_OIDS = "MAP {" + ", ".join(f"{_q(name)}: {t.oid}" for name, t in sorted({
    **{alias: _BY_TYPE_NAME[pg] for alias, pg in TYPE_ALIASES.items() if pg in _BY_TYPE_NAME},
    **{t.sql_name: t for t in TYPES}, **_BY_TYPE_NAME}.items())) + "}"


def _lookup(table: str, key: str, value: str, arg: str, key2: str | None = None,
            arg2: str | None = None, types: tuple = ("BIGINT", "BIGINT")) -> str:
    """``value`` of the ``table`` row whose ``key`` equals the macro argument ``arg``.

    Keys and values come from uncorrelated subqueries (in the same order) and the argument is
    found with list_position, so it is bound where the macro is called: a correlated
    ``WHERE oid = o`` would let a caller's unqualified ``oid`` bind to the subquery's own
    column, and a lambda could not hold another lookup passed in as the argument. Keys and
    arguments are cast to ``types`` so that untyped arguments (NULL, parameters) compare."""
    t1, t2 = types
    k = f"{{'a': {key}::{t1}, 'b': {key2}::{t2}}}" if key2 else f"{key}::{t1}"
    want = (f"{{'a': TRY_CAST({arg} AS {t1}), 'b': TRY_CAST({arg2} AS {t2})}}" if key2
            else f"TRY_CAST({arg} AS {t1})")
    order = f"{key}, {key2}" if key2 else key
    return (f"list_extract((SELECT list({value} ORDER BY {order}) FROM {table}), "
            f"list_position((SELECT list({k} ORDER BY {order}) FROM {table}), {want}))")


def _regclass_in(c: str, schema: str) -> str:
    """The OID of the relation the macro argument ``n`` names in ``schema``."""
    return _lookup(f"(SELECT c.oid, c.relname, s.nspname FROM {c}.pg_class c JOIN "
                   f"{c}.pg_namespace s ON s.oid = c.relnamespace)", "relname", "oid",
                   "lower(trim(split_part(n::VARCHAR, '.', -1), '\"'))", "nspname", schema,
                   types=("VARCHAR", "VARCHAR"))


def _for_me(role: str, mine: str, named: str, c: str, last: str = "c") -> str:
    """A privilege function's body: without a role argument (``last`` is NULL) ``mine``;
    with the session's own role named first, ``named``; with another role, NULL."""
    return (f"CASE WHEN {last} IS NULL THEN {mine} "
            f"WHEN {role}::VARCHAR IN (SELECT rolname FROM {c}.cq_me) THEN {named} END")


def _macro_sql(c: str) -> list[str]:
    """pg_* functions: each becomes a DuckDB macro the translator calls by qualified name."""
    return [f"CREATE MACRO {c}.{sig} AS {body}" for sig, body in _macro_bodies(c).items()]


def _macro_bodies(c: str) -> dict:
    return {
        "pg_get_userbyid(u)": f"coalesce({_lookup(f'{c}.cq_roles', 'oid', 'rolname', 'u')}, "
                              "'unknown (OID=' || u || ')')",
        # current_setting(name) of a name that is not a constant: the server's value
        # (psql's \dconfig); a constant name reads the session's own (translate.py)
        "cq_server_setting(n)": _lookup(f"{c}.pg_settings", "name", "setting", "n",
                                        types=("VARCHAR", "VARCHAR")),
        "pg_encoding_to_char(e)": "'UTF8'",
        "pg_char_to_encoding(e)": "6",
        "pg_table_is_visible(o)": "true",
        "pg_type_is_visible(o)": "true",
        "pg_function_is_visible(o)": "true",
        "pg_operator_is_visible(o)": "true",
        "pg_opclass_is_visible(o)": "true",
        "pg_opfamily_is_visible(o)": "true",
        "pg_statistics_obj_is_visible(o)": "true",
        "pg_conversion_is_visible(o)": "true",
        "pg_collation_is_visible(o)": "true",
        "pg_relation_is_publishable(o)": "false",
        "pg_get_expr(e, r, p := false)": "e::VARCHAR",
        "pg_get_constraintdef(o, p := false)":
            _lookup(f"{c}.pg_constraint", "oid", "cq_def", "o"),
        # the whole CREATE INDEX, or (k > 0) the k-th key column's name
        "pg_get_indexdef(o, k := 0, p := false)":
            f"CASE WHEN coalesce(k, 0) = 0 THEN "
            f"{_lookup(f'{c}.pg_index', 'indexrelid', 'cq_indexdef', 'o')} "
            f"ELSE {_lookup(f'{c}.pg_index', 'indexrelid', 'cq_colnames', 'o')}[k] END",
        "pg_get_viewdef(o, p := false)": "coalesce(" + _lookup(
            "duckdb_views()", "view_oid", "sql", "o") + ", " + _lookup(
            f"{c}.cq_relations", "oid", "definition", "o") + ")",
        "pg_get_function_result(o)": "NULL::VARCHAR",
        "pg_get_function_arguments(o)": "NULL::VARCHAR",
        "pg_get_function_identity_arguments(o)": "NULL::VARCHAR",
        "pg_get_statisticsobjdef_columns(o)": "NULL::VARCHAR",
        "pg_get_serial_sequence(t, col)": "NULL::VARCHAR",
        "pg_get_partkeydef(o)": "NULL::VARCHAR",
        "pg_get_triggerdef(o, p := false)": "NULL::VARCHAR",
        "pg_get_ruledef(o, p := false)": "NULL::VARCHAR",
        "pg_tablespace_location(o)": "''",
        "pg_total_relation_size(o)": "0::BIGINT",
        "pg_relation_size(o, f := 'main')": "0::BIGINT",
        "pg_table_size(o)": "0::BIGINT",
        "pg_indexes_size(o)": "0::BIGINT",
        "pg_database_size(o)": "0::BIGINT",
        "pg_size_pretty(s)": "format_bytes(s::BIGINT)",
        "pg_postmaster_start_time()": "now()",
        "pg_is_in_recovery()": "false",
        "txid_current()": "1::BIGINT",
        "pg_current_xact_id()": "1::BIGINT",
        "obj_description(o, cat := NULL)":
            _lookup(f"{c}.pg_description", "objoid", "description", "o", "objsubid", "0"),
        "shobj_description(o, cat)": "NULL::VARCHAR",
        "col_description(o, n)":
            _lookup(f"{c}.pg_description", "objoid", "description", "o", "objsubid", "n"),
        "format_type(t, m)":
            "CASE WHEN t IS NULL THEN NULL "
            "WHEN t = 1700 AND m > 4 THEN 'numeric(' || ((m - 4) >> 16) || ',' || ((m - 4) & 65535) || ')' "
            "WHEN t IN (1043, 1042) AND m > 4 THEN "
            f"{_lookup(f'{c}.pg_type', 'oid', 'cq_format', 't')} || '(' || (m - 4) || ')' "
            f"ELSE coalesce({_lookup(f'{c}.pg_type', 'oid', 'cq_format', 't')}, '???') END",
        # an identifier quoted only where it must be, as PostgreSQL's quote_ident does
        "quote_ident(s)": "CASE WHEN regexp_full_match(s::VARCHAR, '[a-z_][a-z0-9_]*') AND "
                          "s::VARCHAR NOT IN (SELECT keyword_name FROM duckdb_keywords() "
                          "WHERE keyword_category <> 'unreserved') THEN s::VARCHAR "
                          "ELSE '\"' || replace(s::VARCHAR, '\"', '\"\"') || '\"' END",
        "quote_literal(s)": "'''' || replace(s::VARCHAR, '''', '''''') || ''''",
        "quote_nullable(s)": "coalesce('''' || replace(s::VARCHAR, '''', '''''') || '''', "
                             "'NULL')",
        # 'a."B c"' -> [a, B c]: unquoted parts folded to lower case (no dots inside quotes)
        "parse_ident(s, strict := true)":
            "list_transform(string_split(s::VARCHAR, '.'), lambda x: CASE WHEN "
            "starts_with(trim(x), '\"') THEN replace(trim(trim(x), '\"'), '\"\"', '\"') "
            "ELSE lower(trim(x)) END)",
        # information_schema's data_type and udt_name of a DuckDB type
        "cq_is_data_type(dt)": "CASE WHEN dt LIKE '%[]' THEN 'ARRAY' ELSE " + _lookup(
            f"{c}.pg_type", "oid", "cq_format", f"{c}.cq_type_oid(dt)") + " END",
        "cq_udt_name(dt)": _lookup(f"{c}.pg_type", "oid", "typname", f"{c}.cq_type_oid(dt)"),
        "array_upper(a, d)": "CASE WHEN len(a) = 0 THEN NULL ELSE len(a) END",
        "array_lower(a, d)": "CASE WHEN len(a) = 0 THEN NULL ELSE 1 END",
        "array_ndims(a)": "CASE WHEN len(a) = 0 THEN NULL ELSE 1 END",
        "cq_expandarray(a)": "list_transform(range(1, len(a) + 1), lambda i: {'x': a[i], 'n': i})",
        "current_schemas(b)": "CASE WHEN b THEN ['pg_catalog', 'public'] ELSE ['public'] END",
        # 'name', 'schema.name' (quotes removed) or an OID's digits; an unqualified name is
        # looked up as the search path does, pg_catalog first, then public
        "cq_regclass_oid(n)":
            "CASE WHEN regexp_full_match(n::VARCHAR, '[0-9]+') THEN n::VARCHAR::UINTEGER "
            "WHEN contains(n::VARCHAR, '.') THEN " +
            _regclass_in(c, "trim(split_part(n::VARCHAR, '.', 1), '\"')") +
            " ELSE coalesce(" + _regclass_in(c, "'pg_catalog'") + ", " +
            _regclass_in(c, "'public'") + ") END",
        "cq_regclass_name(o)":
            f"coalesce({_lookup(f'{c}.pg_class', 'oid', 'relname', 'o')}, o::VARCHAR)",
        "cq_regtype_oid(n)":
            f"{_TYPE_OIDS}[lower(replace(replace(n::VARCHAR, 'pg_catalog.', ''), '\"', ''))]",
        "cq_regtype_name(o)":
            f"CASE WHEN o IS NULL THEN NULL ELSE coalesce("
            f"{_lookup(f'{c}.pg_type', 'oid', 'cq_format', 'o')}, o::VARCHAR) END",
        "cq_regnamespace_name(o)":
            _lookup(f"{c}.pg_namespace", "oid", "nspname", "o"),
        "cq_regproc_name(p)": "replace(p::VARCHAR, 'pg_catalog.', '')",
        # 'name'::regproc::oid: the function's OID, or PostgreSQL's error (psql's \sf)
        "cq_regproc_oid(n)": "coalesce(" + _lookup(
            f"{c}.pg_proc", "proname", "oid", "replace(n::VARCHAR, 'pg_catalog.', '')",
            types=("VARCHAR", "VARCHAR")) + ", error('function \"' || n || '\" does not exist'))",
        "has_database_privilege(a, b, c := NULL)": "true",
        "has_sequence_privilege(a, b, c := NULL)": "true",
        "cq_privileges(p)": "list_transform(string_split(upper(p::VARCHAR), ','), "
                            "lambda x: trim(replace(x, 'WITH GRANT OPTION', '')))",
        "cq_relid(t)": f"coalesce(TRY_CAST(t AS BIGINT), {c}.cq_regclass_oid(t))",
        "cq_has_table(t, p)": "list_has_any(coalesce(" + _lookup(
            f"{c}.cq_my_privileges", "relid", "privileges", f"{c}.cq_relid(t)") +
            f", []), {c}.cq_privileges(p))",
        "cq_has_schema(s, p)": "list_has_any(coalesce(" + _lookup(
            f"{c}.cq_my_schemas", "nspname", "privileges",
            "CASE WHEN TRY_CAST(s AS BIGINT) IS NULL THEN s::VARCHAR ELSE " +
            _lookup(f"{c}.pg_namespace", "oid", "nspname", "s") + " END",
            types=("VARCHAR", "VARCHAR")) + f", []), {c}.cq_privileges(p))",
        "cq_has_role(r)": f"list_contains((SELECT list(rolname) FROM {c}.cq_my_roles), "
                          "CASE WHEN TRY_CAST(r AS BIGINT) IS NULL THEN r::VARCHAR ELSE " +
                          _lookup(f"{c}.cq_roles", "oid", "rolname", "r") + " END)",
        # the privilege functions answer for the session's role (cq_my_*); given another
        # role's name they answer NULL (cqgate does not work out other roles' privileges)
        "has_table_privilege(a, b, c := NULL)": _for_me("a", f"{c}.cq_has_table(a, b)",
                                                        f"{c}.cq_has_table(b, c)", c),
        "has_any_column_privilege(a, b, c := NULL)": _for_me("a", f"{c}.cq_has_table(a, b)",
                                                             f"{c}.cq_has_table(b, c)", c),
        "has_column_privilege(a, b, c := NULL, d := NULL)": _for_me(
            "a", f"{c}.cq_has_table(a, c)", f"{c}.cq_has_table(b, d)", c, last="d"),
        "has_schema_privilege(a, b, c := NULL)": _for_me("a", f"{c}.cq_has_schema(a, b)",
                                                         f"{c}.cq_has_schema(b, c)", c),
        "pg_has_role(a, b, c := NULL)": _for_me("a", f"{c}.cq_has_role(a)",
                                                f"{c}.cq_has_role(b)", c),
    }


# pg function names the translator points at pgcat macros (cq_* helpers it calls itself).
FUNCTIONS = {sig.split("(")[0] for sig in _macro_bodies(CATALOG)
             if not sig.startswith("cq_")}
