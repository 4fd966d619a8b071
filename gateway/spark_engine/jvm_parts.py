"""The engine's parts that must run in Spark's JVM (``jvm/``: the spool as a real-time
source, the rows' way back): compiled once per machine and Spark version into a jar.

``jar()`` gives the jar's path, compiling it with the JDK's ``javac`` against Spark's own
jars when no jar of these sources and this Spark is cached yet, or None (and why, logged
once) when it cannot: then no query runs in real-time mode. The cache is
``$CQGATE_CACHE_DIR`` or ``~/.cache/cqgate``; a jar appears there whole (renamed into place),
so servers starting at once may both compile but never read half a jar.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile

import pyspark

log = logging.getLogger("cqgate")
SOURCES = os.path.join(os.path.dirname(__file__), "jvm")
COMPILE_S = 300          # javac's limit: a compile that takes longer is stuck
_lock = threading.Lock()
_known: dict = {}        # "jar": its path or None, once looked for


def _sources() -> list:
    out = []
    for folder, _, names in os.walk(SOURCES):
        out += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".java")]
    return sorted(out)


def _cache_dir() -> str:
    return os.environ.get("CQGATE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "cqgate")


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    return shutil.which("javac")


def jar() -> str | None:
    with _lock:
        if "jar" not in _known:
            try:
                _known["jar"] = _build()
            except (OSError, subprocess.SubprocessError) as e:
                log.warning("Spark's real-time mode is off: the engine's JVM parts did not "
                            "compile: %s", e)
                _known["jar"] = None
        return _known["jar"]


def _build() -> str | None:
    sources = _sources()
    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in sources:
        with open(path, "rb") as f:
            digest.update(f.read())
    target = os.path.join(_cache_dir(), f"cqgate-spark-{digest.hexdigest()[:16]}.jar")
    if os.path.exists(target):
        return target
    javac = _javac()
    if javac is None:
        log.warning("Spark's real-time mode is off: no javac (a JDK) found")
        return None
    spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    os.makedirs(_cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=_cache_dir()) as work:
        classes = os.path.join(work, "classes")
        done = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-d", classes,
                               "-cp", spark_jars, *sources], capture_output=True, text=True,
                              timeout=COMPILE_S)
        if done.returncode:
            raise subprocess.SubprocessError(done.stderr.strip()[-2000:])
        made = os.path.join(work, "cqgate-spark.jar")
        with zipfile.ZipFile(made, "w", zipfile.ZIP_DEFLATED) as z:
            for folder, _, names in os.walk(classes):
                for n in names:
                    full = os.path.join(folder, n)
                    z.write(full, os.path.relpath(full, classes))
        os.replace(made, target)
    log.info("compiled the Spark engine's JVM parts: %s", target)
    return target
