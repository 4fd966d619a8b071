"""The architecture, checked by walking every module's imports with Python's ``ast``: layers point
one way (gateway → dialect → executor), the wire layer stands alone, the gateway reaches the
executor only through its plan and wire modules, no import cycle, and imports inside functions
only for a heavy optional dependency loaded on first use (pyspark)."""
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
    "the gateway reaches the executor only through its plan and wire modules":
        lambda m, t: _within(m, "gateway") and _within(t, "executor")
        and t not in ("executor", "executor.plan", "executor.wire"),
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
        "the gateway reaches the executor only through its plan and wire modules":
            ("gateway.streams.queries", "executor.operators.loop_window"),
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
