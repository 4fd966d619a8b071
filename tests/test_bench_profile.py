"""bench/nexmark/stage_profile.py's reading of py-spy's collapsed stacks: each sample's stage is
named by the innermost frame of the project's own code, by process."""
import os
import sys

from bench.nexmark.stage_profile import OTHER, stage_of, stages

LOOP = "run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1922)"


def _stack(*frames: str) -> list:
    return (LOOP + ";" + ";".join(frames)).split(";")


def test_the_innermost_project_frame_names_the_stage():
    push = "push (/srv/cqgate/gateway/clearinghouse/ingest.py:71)"
    send = "BackendLink.send_data (/srv/cqgate/gateway/link/backend_link.py:353)"
    parts = "data_parts (/srv/cqgate/executor/wire.py:225)"
    cast = "cast (pyarrow/compute.py:415)"
    assert stage_of("gateway", _stack(push, cast)) == "slack ordering"
    assert stage_of("gateway", _stack(push, send)) == "framing to the back end"
    assert stage_of("gateway", _stack(push, send, parts, cast)) == "framing to the back end"
    rows = "parse_rows (/srv/cqgate/executor/wire.py:402)"
    assert stage_of("gateway", _stack("BackendLink._on_rows (/srv/cqgate/gateway/link/"
                                      "backend_link.py:151)", rows)) == "result framing"
    assert stage_of("gateway", _stack("copy_lines (/srv/cqgate/gateway/pgwire/"
                                      "copy_format.py:186)")) == "wire encoding"
    assert stage_of("gateway", _stack("handle (/srv/cqgate/gateway/sources/ingest_port.py:502)",
                                      cast)) == "ingest parse"
    # the back end sending its answers is result framing
    assert stage_of("back_end", _stack("serve (/srv/cqgate/executor/backend.py:326)",
                                       "send_parts (/srv/cqgate/executor/wire.py:247)")) \
        == "result framing"
    assert stage_of("back_end", _stack("Aggregate.on_batch (/srv/cqgate/executor/operators/"
                                       "aggregates/aggregate.py:248)")) == "operator work"
    assert stage_of("gateway", _stack()) == OTHER
    assert stage_of("gateway", _stack("build (/srv/cqgate/gateway/tables/pg_catalog.py:236)")) \
        == OTHER


def test_collapsed_lines_are_counted_per_stage(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(
        LOOP + ";copy_lines (/srv/cqgate/gateway/pgwire/copy_format.py:186) 7\n"
        + LOOP + " 3\n"
        + LOOP + ";handle (/srv/cqgate/gateway/sources/ingest_port.py:502) 5\n\n")
    assert stages("gateway", str(raw)) == {"wire encoding": 7, OTHER: 3, "ingest parse": 5}


def test_no_bench_module_is_named_like_a_standard_library_one():
    """The peers run as scripts (``python bench/nexmark/peer_flink.py``), so their folder comes
    first on sys.path: a ``profile.py`` there was imported by cProfile (through Beam, in
    PyFlink) in place of the standard library's, and both peers failed before their first
    event."""
    bench = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
    mine = {os.path.join(os.path.relpath(d, bench), f)
            for d, _, files in os.walk(bench) if ".venvs" not in d
            for f in files if f.endswith(".py") and f[:-3] in sys.stdlib_module_names}
    assert not mine


def test_a_copy_encoded_in_the_back_end_counts_as_wire_encoding():
    encode = "copy_lines (/srv/cqgate/executor/pg_text.py:240)"
    emit = "Backend._emit (/srv/cqgate/executor/backend.py:307)"
    assert stage_of("back_end", _stack(emit, encode)) == "wire encoding"
    assert stage_of("gateway", _stack(encode)) == "wire encoding"
