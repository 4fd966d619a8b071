"""The parts of the running gateway that statements may use: config, clock, store, streams, worker
pool, back-end link, archive, Spark (archive queries, and continuous queries on it), ingest,
wrapper folders, sessions, roles and their grants, connectors; no socket, no lifecycle."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gateway.archive.spark import Spark
from gateway.archive.storage import Archive
from gateway.clearinghouse.ingest import Ingest
from gateway.clock import Clock
from gateway.connectors.runtime import Connectors
from gateway.link.backend_link import BackendLink
from gateway.config import Config
from gateway.security.privileges import Grants
from gateway.security.roles import Roles
from gateway.security.server_files import ServerFiles
from gateway.spark_engine.streaming import SparkStreams
from gateway.streams.registry import StreamRegistry
from gateway.tables.store import Store


@dataclass(frozen=True, eq=False)
class Services:
    config: Config
    clock: Clock                      # the time every part of the gateway reads
    store: Store                      # the DuckDB file
    streams: StreamRegistry
    pool: ThreadPoolExecutor          # DuckDB calls and big encodings run here
    backend: BackendLink
    archive: Archive
    spark: Spark
    spark_streams: SparkStreams       # continuous queries run on Spark (cq.engine = spark)
    ingest: Ingest
    wrapper_dirs: list                # user wrappers (CREATE WRAPPER) load only from these
    sessions: dict                    # pid -> Session: system views and CancelRequest
    roles: Roles                      # who may connect, and as what
    grants: Grants                    # who owns what, and who may do what with it
    files: ServerFiles                # the server's files, for roles that may reach them
    connectors: Connectors            # streams that follow PostgreSQL tables; sinks
