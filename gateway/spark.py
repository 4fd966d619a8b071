"""Spark, for finite queries over archived streams: one SparkSession per server, started on
the first archive query (or at start with ``--spark-warm``) and kept warm; ``local[*]`` by
default, a standalone cluster with ``--spark-master spark://host:7077``.

``run`` takes Spark SQL over temporary views, each view the archive files of one stream
restricted to a time range, and returns the answer as an Arrow table. Timestamps are
TIMESTAMP_NTZ in UTC throughout, as the archive writes them.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

log = logging.getLogger("cqgate")


@dataclass(frozen=True)
class ArchiveView:
    """The tuples of one archived stream with low ≤ ts < high, read from ``files``."""
    files: tuple
    columns: tuple            # ((name, DuckDB type), ...)
    ts_column: str
    low: str                  # timestamp literals, 'YYYY-MM-DD HH:MM:SS[.ffffff]'
    high: str


def _spark_type(duck_type: str) -> str:
    t = exp.DataType.build(duck_type, dialect="duckdb")
    if t.this == exp.DataType.Type.TIMESTAMP:
        return "TIMESTAMP_NTZ"
    return t.sql("spark")


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Spark:
    def __init__(self, master: str = "local[*]", data_dir: str = ""):
        self.master = master
        self.data_dir = data_dir
        self._session = None
        self._lock = threading.Lock()

    def _driver_host(self) -> str:
        """Where executors reach this driver: loopback for local work and a cluster on this
        machine; otherwise CQGATE_SPARK_DRIVER_HOST, or this host's name."""
        named = os.environ.get("CQGATE_SPARK_DRIVER_HOST")
        if named:
            return named
        if self.master.startswith("local") or "://127.0.0.1" in self.master or \
                "://localhost" in self.master:
            return "127.0.0.1"
        return socket.gethostname()

    def session(self):
        with self._lock:
            if self._session is None:
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                from pyspark.sql import SparkSession
                b = (SparkSession.builder.master(self.master).appName("cqgate")
                     .config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.session.timeZone", "UTC")
                     .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
                     .config("spark.sql.shuffle.partitions", "4")
                     .config("spark.driver.host", self._driver_host())
                     .config("spark.driver.bindAddress",
                             os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")))
                if self.data_dir:
                    b = b.config("spark.local.dir", os.path.join(self.data_dir, "spark-tmp"))
                self._session = b.getOrCreate()
                self._session.sparkContext.setLogLevel("ERROR")
                log.info("Spark session started (master %s)", self.master)
            return self._session

    def run(self, sql: str, views: dict) -> pa.Table:
        """``sql`` (Spark SQL) with each name in ``views`` bound to its ArchiveView."""
        spark = self.session()
        made = []
        try:
            for name, v in views.items():
                cols = ", ".join(_q(c) for c, _ in v.columns)
                if v.files:
                    raw = f"cq_raw_{uuid.uuid4().hex}"
                    spark.read.parquet(*v.files).createOrReplaceTempView(raw)
                    made.append(raw)
                    body = (f"SELECT {cols} FROM {raw} WHERE {_q(v.ts_column)} >= "
                            f"TIMESTAMP_NTZ '{v.low}' AND {_q(v.ts_column)} < "
                            f"TIMESTAMP_NTZ '{v.high}'")
                else:
                    body = "SELECT " + ", ".join(
                        f"CAST(NULL AS {_spark_type(t)}) AS {_q(c)}" for c, t in v.columns) + \
                        " WHERE false"
                spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS {body}")
                made.append(name)
            return spark.sql(sql).toArrow()
        finally:
            for name in made:
                spark.catalog.dropTempView(name)

    def stop(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.stop()
                self._session = None
