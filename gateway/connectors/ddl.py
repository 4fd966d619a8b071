"""Connector DDL: CREATE SECRET, CREATE SOURCE … FROM POSTGRES and CREATE STREAM … FROM SOURCE
(DROP of each goes through the stream objects' DROP). Secrets, sources and sinks are objects of
the stream registry in schemas of their own (``cq_secret``, ``cq_source``, ``cq_sink``), so
names, owners, dependencies (DROP … CASCADE) and the catalog file are the streams'; none of
them is a relation, so no query and no catalog view shows them, and a definition kept never
holds a password.

Creating a source or sink makes the server connect to other systems (or write files), so it is
for superusers, as PostgreSQL's CREATE SUBSCRIPTION is; the streams a source feeds are granted
as any stream is. A secret is its owner's: only statements of a role with its owner's
privileges may name it.
"""
from __future__ import annotations

from sqlglot import exp

from dialect import expressions as X
from dialect.names import folded

from gateway.connectors import postgres_source as PS
from gateway.connectors.runtime import SECRET, SOURCE
from gateway.pgwire import errors as E
from gateway.pgwire.results import Done
from gateway.security import access
from gateway.security.redaction import redacted
from gateway.connectors.postgres_wire import parse_dsn
from gateway.streams.registry import StreamObject
from gateway.tables.statement_context import AwaitOnLoop, StatementContext

SOURCE_OPTIONS = ("connection", "publication", "password")
STREAM_FROM_SOURCE_OPTIONS = ("fragment",)
# what a stream that follows a table says to the clearinghouse: commits come in order (no
# slack), and the source moves the watermark itself (from the server's clock), not the wall
# clock
FOLLOWING = {"slack": "none", "heartbeat": "none"}


def exists(ctx: StatementContext, schema: str, name: str, kind: str, if_not_exists) -> bool:
    if ctx.services.streams.get(schema, name) is None:
        return False
    if if_not_exists:
        ctx.notices.append(("NOTICE", "42710", f'{kind} "{name}" already exists, skipping'))
        return True
    raise E.PgError(f'{kind} "{name}" already exists', sqlstate="42710")


def keep(ctx: StatementContext, obj: StreamObject, tag: str) -> Done:
    ctx.services.streams.save(obj)
    ctx.services.grants.created(obj.key, ctx.user)
    return Done(tag)


# ---------------------------------------------------------------------- secrets
def create_secret(ctx: StatementContext, tree: X.CreateSecret, params) -> Done:
    name = folded(tree.this)
    if exists(ctx, SECRET, name, "secret", tree.args.get("exists")):
        return Done("CREATE SECRET")
    obj = StreamObject(ctx.services.streams.next_oid(), "secret", SECRET, name,
                       redacted(tree.sql("cql")),
                       options={"value": tree.expression.name})
    return keep(ctx, obj, "CREATE SECRET")


def _secret(ctx: StatementContext, name: str) -> StreamObject:
    obj = ctx.services.streams.get(SECRET, name, kinds=("secret",))
    if obj is None:
        raise E.UndefinedObject(f'secret "{name}" does not exist')
    access.require_owner(ctx, "secret", SECRET, name)
    return obj


def secret_password(ctx: StatementContext, value) -> StreamObject | None:
    """The secret ``PASSWORD SECRET s`` names (its owner's only), or None without one."""
    if value is None:
        return None
    if not isinstance(value, X.SecretRef):
        raise E.InvalidParameterValue("PASSWORD names a secret: PASSWORD SECRET name",
                                      hint="CREATE SECRET name AS '…' first.")
    return _secret(ctx, folded(value.this))


# ---------------------------------------------------------------------- sources
def connector_options(tree, known: tuple, what: str) -> dict:
    out = {}
    for item in tree.args.get("options") or []:
        key = item.this.name.lower()
        if key not in known:
            raise E.InvalidParameterValue(f'unrecognized {what} option "{key}"',
                                          hint="Known options: " + ", ".join(known) + ".")
        value = item.args["value"]
        out[key] = value if isinstance(value, X.SecretRef) else value.name
    return out


def create_source(ctx: StatementContext, tree: X.CreateSource, params):
    access.require_superuser(ctx, "create a source")
    name = folded(tree.this)
    if exists(ctx, SOURCE, name, "source", tree.args.get("exists")):
        return Done("CREATE SOURCE")
    if tree.args["kind"] != "POSTGRES":
        raise E.FeatureNotSupported(f"a source reads from POSTGRES, not {tree.args['kind']}")
    given = connector_options(tree, SOURCE_OPTIONS, "source")
    for required in ("connection", "publication"):
        if not isinstance(given.get(required), str):
            raise E.PgError(f'a source needs the option {required.upper()} \'…\'',
                            sqlstate="42601")
    try:
        dsn = parse_dsn(given["connection"])
    except ValueError as e:
        raise E.InvalidParameterValue(f"invalid CONNECTION string: {e}") from None
    options = {"connection": given["connection"], "publication": given["publication"]}
    depends = []
    secret = secret_password(ctx, given.get("password"))
    if secret is not None:
        options["password_secret"] = secret.name
        dsn["password"] = secret.options["value"]
        depends.append(secret.key)
    obj = StreamObject(ctx.services.streams.next_oid(), "source", SOURCE, name,
                       redacted(tree.sql("cql")), options=options, depends_on=depends)
    return AwaitOnLoop(lambda: PS.check_source(dsn, options["publication"]),
                       lambda _: keep(ctx, obj, "CREATE SOURCE"))


def create_stream_from_source(ctx: StatementContext, tree: X.CreateStream, schema: str,
                              name: str, options: dict):
    """CREATE STREAM s FROM SOURCE pg TABLE t: the table's columns and key, read from the
    server; the slot and its snapshot are made before this returns."""
    svc = ctx.services
    source = svc.streams.get(SOURCE, folded(tree.args["source"]), kinds=("source",))
    if source is None:
        raise E.UndefinedObject(f'source "{folded(tree.args["source"])}" does not exist')
    access.require_owner(ctx, "source", SOURCE, source.name)
    unknown = set(options) - set(STREAM_FROM_SOURCE_OPTIONS)
    if unknown or tree.args.get("archived") is False or tree.args.get("overload"):
        raise E.FeatureNotSupported(
            "a stream that follows a PostgreSQL table is archived, in commit order, and "
            "takes only WITH (fragment = …)", hint="Drop the other options.")
    table: exp.Table = tree.args["source_table"]
    pg_schema, pg_table = (table.db or "public"), table.name
    try:
        dsn = svc.connectors.dsn(source)
    except KeyError as e:
        raise E.UndefinedObject(str(e.args[0])) from None

    def made(shape: PS.TableShape):
        obj = StreamObject(
            svc.streams.next_oid(), "stream", schema, name, tree.sql("cql"),
            [[n, t, False] for n, t in shape.columns]
            + [[PS.COMMIT, "TIMESTAMP", True], [PS.OP, "VARCHAR", True],
               [PS.LSN, "BIGINT", True]],
            PS.COMMIT, None, True,
            {**options, **FOLLOWING, "source": source.name,
             "table": f"{pg_schema}.{pg_table}", "key": ",".join(shape.key)},
            depends_on=[source.key]).made_from(tree.copy())
        svc.streams.save(obj)
        svc.grants.created(obj.key, ctx.user)

        async def follow():
            try:
                await svc.connectors.follow_new(obj, source)
            except BaseException:
                await _forget(svc, obj)
                raise
        return AwaitOnLoop(follow, lambda _: Done("CREATE STREAM"))

    return AwaitOnLoop(lambda: PS.describe(dsn, source.options["publication"], pg_schema,
                                           pg_table), made)


async def _forget(svc, obj: StreamObject) -> None:
    """A stream whose snapshot failed leaves nothing behind."""
    svc.streams.remove(obj)
    svc.grants.dropped(obj.key)
    svc.ingest.forget(obj.relation().name)
    svc.archive.drop(obj.key)
