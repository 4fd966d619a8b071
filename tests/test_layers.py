"""The architecture, checked by walking every module's imports with Python's ``ast``: layers point
one way (gateway → dialect → executor), the wire layer stands alone, the gateway reaches the
executor only through its plan and wire modules and the checkpoint folders' (and its wire
layer through the rows' text form), the gateway's rooms (its folders) stand on each
other in one order, no folder holds more than 12 modules, no import cycle, and imports inside
functions only for a heavy optional dependency loaded on first use (pyspark)."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "dialect", "executor")
LAZY_ALLOWED = ("pyspark", "py4j")   # loaded on first use: the archive's Spark session and its bridge


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


MODULES = _modules()


def _imports(name: str) -> list:
    """(imported module, line, at top level) for each import of ``name``, relative ones
    resolved; ``from pkg import mod`` counts as importing ``pkg.mod`` when that is a module."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top_level = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) in top_level) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((full if full in MODULES else base, node.lineno,
                            id(node) in top_level))
    return out


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _violations(rule) -> list:
    return [f"{name}:{line} imports {target}" for name in sorted(MODULES)
            for target, line, _ in _imports(name) if rule(name, target)]


RULES = {
    "the executor imports neither the dialect, the gateway nor sqlglot":
        lambda m, t: _within(m, "executor") and any(
            _within(t, p) for p in ("dialect", "gateway", "sqlglot")),
    "the dialect never imports the gateway":
        lambda m, t: _within(m, "dialect") and _within(t, "gateway"),
    "the wire layer imports nothing else of the gateway":
        lambda m, t: _within(m, "gateway.pgwire") and _within(t, "gateway")
        and not _within(t, "gateway.pgwire"),
    # pg_text is the rows' text form, which the back end writes for a COPY and the wire layer
    # for everything else; checkpoints is the folder the back end saves a cursor's state in
    # and the gateway finds the newest one of (and removes) for its restart
    "the gateway reaches the executor only through its plan, wire and checkpoint-folder modules (its wire layer through pg_text too)":
        lambda m, t: _within(m, "gateway") and _within(t, "executor")
        and t not in ("executor", "executor.plan", "executor.wire", "executor.checkpoints")
        and not (t == "executor.pg_text" and _within(m, "gateway.pgwire")),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_layers(rule):
    assert _violations(RULES[rule]) == []


def test_rules_catch_a_crossing():
    """The rules are not vacuous: each one fires on an import that breaks it."""
    samples = {
        "the executor imports neither the dialect, the gateway nor sqlglot":
            ("executor.graph", "sqlglot.exp"),
        "the dialect never imports the gateway": ("dialect.parser", "gateway.pgwire.errors"),
        "the wire layer imports nothing else of the gateway":
            ("gateway.pgwire.messages", "gateway.sessions.session"),
        "the gateway reaches the executor only through its plan, wire and checkpoint-folder modules (its wire layer through pg_text too)":
            ("gateway.streams.queries", "executor.pg_text"),
    }
    for rule, (module, target) in samples.items():
        assert RULES[rule](module, target), rule


def _graph() -> dict:
    return {name: {t for t, _, _ in _imports(name) if t in MODULES and t != name}
            for name in MODULES}


def _cycle(graph: dict) -> list | None:
    """One import cycle (as a list of modules) or None, by depth-first search."""
    state: dict = {}
    stack: list = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle():
    # a package's __init__ importing its own modules is not a cycle of the modules
    graph = {m: {t for t in ts if not _within(m, t)} for m, ts in _graph().items()}
    assert _cycle(graph) is None


def test_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_imports_inside_functions_only_for_lazy_dependencies():
    inner = [f"{name}:{line} imports {target}" for name in sorted(MODULES)
             for target, line, top in _imports(name)
             if not top and not any(_within(target, lazy) for lazy in LAZY_ALLOWED)]
    assert inner == []


# The gateway's rooms, lowest first: a room imports only rooms of its own level or below.
# A module directly in gateway/ is a room of its own.
ROOM_ORDER = (
    {"__init__", "clock", "durable", "config", "catalog_files"},  # base values
    {"pgwire"},              # the wire protocol, sans I/O, and PgError
    {"link"},                # the back end's link and its result rows
    {"tables"},              # the DuckDB store, the emulated catalog, settings
    {"security"},            # roles, privileges, what a role may reach
    {"syntax"},              # the session's own statements, read from tokens
    {"clearinghouse"},       # slack, ingest, spools, logs
    {"archive"},             # archived streams, Spark over them, priming, late reach
    {"spark_engine"},        # continuous queries on Spark
    # stream statements (registry, DDL, queries) and connectors (secrets, sources and sinks
    # of other systems), whose streams are the registry's and whose DDL is a stream's
    {"streams", "connectors"},
    {"system_views"},        # the live catalog as one session sees it
    {"services"},            # the running parts statements may use
    {"sources"},             # the ingest port and wrappers
    {"sessions"},            # one client's session and its commands
    {"process", "__main__"},  # the server's lifecycle, CLI, metrics
)
MAX_MODULES = 12


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "gateway":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _level(room: str) -> int:
    return next(i for i, rooms in enumerate(ROOM_ORDER) if room in rooms)


def _upward(module: str, target: str) -> bool:
    """An import from a lower room into a higher one."""
    a, b = _room(module), _room(target)
    return a is not None and b is not None and _level(a) < _level(b)


def test_every_room_is_in_the_order():
    rooms = {_room(m) for m in MODULES} - {None}
    assert rooms <= set().union(*ROOM_ORDER), rooms - set().union(*ROOM_ORDER)


def test_rooms_stand_on_each_other_in_one_order():
    assert _violations(_upward) == []


def test_room_rule_catches_an_upward_import():
    assert _upward("gateway.tables.store", "gateway.sessions.session")
    assert _upward("gateway.clearinghouse.ingest", "gateway.archive.priming")
    assert not _upward("gateway.sessions.session", "gateway.tables.store")
    assert not _upward("gateway.tables.store", "executor.plan")


def test_no_folder_holds_more_than_twelve_modules():
    crowded = {}
    for folder in {p.parent for p in MODULES.values()}:
        n = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        if n > MAX_MODULES:
            crowded[str(folder.relative_to(ROOT))] = n
    assert crowded == {}


# privates of other libraries the project must reach: PySpark's JVM handles, and os._exit (the
# documented way to leave a forked child at once)
FOREIGN_PRIVATE = ("_jvm", "_jdf", "os")


def _functions(tree) -> list:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                        ast.Lambda))]


def _session_takers(name: str) -> list:
    """Functions of ``name`` with a parameter named ``session`` (the whole client session)."""
    tree = ast.parse(MODULES[name].read_text())
    out = []
    for f in _functions(tree):
        a = f.args
        params = a.posonlyargs + a.args + a.kwonlyargs
        if any(p.arg == "session" for p in params):
            out.append(f"{name}:{f.lineno}")
    return out


def test_outside_the_session_room_no_function_takes_the_whole_session():
    """Stream statements, security checks and archive queries take a StatementContext
    (gateway/tables/statement_context.py), the few things a statement needs of its session."""
    takers = [t for m in sorted(MODULES) if _within(m, "gateway") and
              not _within(m, "gateway.sessions") for t in _session_takers(m)]
    assert takers == []


def _private_calls(name: str) -> list:
    """Calls ``x._method(…)`` of ``name`` on something other than self or cls, of a method
    the module does not define itself."""
    tree = ast.parse(MODULES[name].read_text())
    own = {f.name for f in _functions(tree) if not isinstance(f, ast.Lambda)}
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, target = node.func.attr, node.func.value
        if not attr.startswith("_") or attr.startswith("__") or attr in own:
            continue
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            continue
        if any(f in ast.unparse(target).split(".") for f in FOREIGN_PRIVATE):
            continue
        out.append(f"{name}:{node.lineno} calls {ast.unparse(node.func)}")
    return out


def test_no_module_calls_another_modules_private_methods():
    calls = [c for m in sorted(MODULES) for c in _private_calls(m)]
    assert calls == []


def test_the_context_and_privacy_rules_fire(tmp_path, monkeypatch):
    """Both rules find what they look for in a module written to break them."""
    bad = tmp_path / "bad.py"
    bad.write_text("def check(session, x):\n    return session._call(x)\n")
    monkeypatch.setitem(MODULES, "gateway.streams.bad", bad)
    assert _session_takers("gateway.streams.bad") == ["gateway.streams.bad:1"]
    assert _private_calls("gateway.streams.bad") == [
        "gateway.streams.bad:2 calls session._call"]


# Spark calls foreachBatch in a thread of its own, which hands each batch to the loop and waits
BLOCKS_ON_THE_LOOP = ("gateway.spark_engine.streaming",)


def test_no_gateway_thread_blocks_on_the_event_loop():
    """A statement that needs the back end returns an AwaitOnLoop that the session awaits
    (gateway/tables/statement_context.py); no worker thread waits for the loop."""
    waits = []
    for name in sorted(MODULES):
        if not _within(name, "gateway") or name in BLOCKS_ON_THE_LOOP:
            continue
        tree = ast.parse(MODULES[name].read_text())
        waits += [f"{name}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and n.attr == "run_coroutine_threadsafe"]
    assert waits == []
