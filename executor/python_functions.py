"""Scalar Python functions: a definition (``PythonFunction``) that travels in a plan, and what runs
it, a DuckDB function over Arrow batches: one call per batch, vectorised where the function is.

A definition is either a body written in SQL (``CREATE FUNCTION … LANGUAGE python AS $$ … $$``,
PL/Python's form: the parameters are local names, ``args`` lists them, ``return`` gives the
value) or a module function the operator names (``--function name=module:function``). A body
runs once per row with Python values (None for NULL); a module function whose ``vectorized``
attribute is true takes the batch's columns as Arrow arrays and returns one. DuckDB knows each
definition by ``duck_name``, which holds a hash of it, so that a query keeps the definition it
was planned with when another replaces it.

>>> f = PythonFunction("count_char", ("s", "c"), ("VARCHAR", "VARCHAR"), "INTEGER",
...                    body="return s.count(c)", strict=True)
>>> import pyarrow as pa
>>> f.batch_callable()(pa.array(["abca", None]), pa.array(["a", "a"])).to_pylist()
[2, None]
"""
from __future__ import annotations

import builtins
import functools
import hashlib
import importlib
import inspect
import json
import re
import textwrap
from dataclasses import asdict, dataclass

import duckdb
import pyarrow as pa

from .udf import arrow_type

# how the functions of this module name themselves in DuckDB: py_<name>_<hash>
PREFIX = "py_"


class FunctionError(Exception):
    """A Python function's definition is wrong (its body does not compile, its module or
    function cannot be found): the user's mistake, 42P13 as PostgreSQL says of a function."""


@dataclass(frozen=True)
class PythonFunction:
    name: str
    params: tuple            # parameter names, as the body reads them
    types: tuple             # their DuckDB types
    returns: str             # the result's DuckDB type
    body: str = ""           # a body written in SQL: Python statements
    target: str = ""         # or module:function, named by the operator
    strict: bool = False     # NULL in, NULL out, without a call (STRICT)
    volatile: bool = False   # its value may change from call to call (VOLATILE)

    @functools.cached_property
    def duck_name(self) -> str:
        """Its name in DuckDB: the name and a hash of the whole definition."""
        digest = hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()
        return f"{PREFIX}{self.name.lower()}_{digest[:10]}"

    @functools.cached_property
    def vectorized(self) -> bool:
        return bool(self.target) and bool(getattr(self._callable(), "vectorized", False))

    def _callable(self):
        """The Python function itself (a body compiled, or a module's function imported)."""
        return _compiled(self.name, self.params, self.body) if not self.target \
            else _imported(self.target)

    def check(self) -> None:
        """Raise FunctionError unless the definition compiles (or imports) and its types are
        DuckDB's."""
        if not self.params:
            raise FunctionError(f"function {self.name} needs a parameter: a Python function "
                                "is called on the values of a row")
        self._callable()
        for t in (*self.types, self.returns):
            try:
                arrow_type(t)
            except duckdb.Error as e:
                raise FunctionError(f'type "{t}" does not exist: {e}') from None

    def batch_callable(self):
        """A function of Arrow arrays (one per parameter) to an Arrow array of the result's
        type, as DuckDB calls an ``arrow`` function."""
        fn, out_type, strict = self._callable(), arrow_type(self.returns), self.strict
        if self.vectorized:
            def call(*arrays):
                return _as_array(fn(*arrays), out_type, self)
        else:
            def call(*arrays):
                rows = zip(*(a.to_pylist() for a in arrays))
                return _as_array([None if strict and any(v is None for v in row) else fn(*row)
                                  for row in rows], out_type, self)
        # DuckDB counts a function's parameters by its signature
        call.__signature__ = inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY) for p in self.params])
        return call

    def install(self, con: duckdb.DuckDBPyConnection, name: str | None = None) -> None:
        """Define it in ``con``'s database as ``name`` (default: ``duck_name``)."""
        con.create_function(name or self.duck_name, self.batch_callable(),
                            [duckdb.sqltype(t) for t in self.types],
                            duckdb.sqltype(self.returns), type="arrow",
                            null_handling="special", side_effects=self.volatile)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "PythonFunction":
        return cls(**{**d, "params": tuple(d["params"]), "types": tuple(d["types"])})


def _as_array(values, out_type: pa.DataType, fn: PythonFunction) -> pa.Array:
    """The function's values as an Arrow array of its declared type; a value that is not of
    that type is the function's error, said as such."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    try:
        if isinstance(values, pa.Array):
            return values if values.type == out_type else values.cast(out_type)
        return pa.array(values, type=out_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"function {fn.name} returned a value that is not {fn.returns}: {e}") \
            from None


@functools.lru_cache(maxsize=256)
def _compiled(name: str, params: tuple, body: str):
    """A body as PL/Python runs it: a function of the parameters, ``args`` listing them."""
    names = ", ".join(params)
    source = (f"def __cq_function({names}):\n"
              f"    args = [{names}]\n"
              + textwrap.indent(textwrap.dedent(body.strip("\n")) or "pass", "    "))
    scope = {"__builtins__": builtins, "__name__": f"cqgate_function_{name}"}
    try:
        exec(compile(source, f"<function {name}>", "exec"), scope)  # noqa: S102 - a superuser's
    except SyntaxError as e:
        raise FunctionError(f"the body of function {name} is not Python: {e.msg} "
                            f"(line {max(1, (e.lineno or 2) - 2)})") from None
    return scope["__cq_function"]


@functools.lru_cache(maxsize=256)
def _imported(target: str):
    module, _, attr = target.partition(":")
    if not (module and attr):
        raise FunctionError(f"{target!r} is not module:function")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise FunctionError(f"cannot load {target}: {e}") from None
    if not callable(fn):
        raise FunctionError(f"{target} is not a function")
    return fn


def from_module(name: str, target: str) -> PythonFunction:
    """The function ``--function name=module:function`` names: its parameters' and result's
    types are its attributes ``arg_types`` and ``returns`` (DuckDB spellings)."""
    fn = _imported(target)
    types = tuple(getattr(fn, "arg_types", ()))
    returns = getattr(fn, "returns", None)
    if returns is None:
        raise FunctionError(f"{target} needs a returns attribute: its result's SQL type")
    f = PythonFunction(name.lower(), tuple(f"_p{i}" for i in range(1, len(types) + 1)), types,
                       returns, target=target, strict=bool(getattr(fn, "strict", False)),
                       volatile=bool(getattr(fn, "volatile", False)))
    f.check()
    return f


def load(spec: str | None) -> list:
    """The functions of ``name=module:function[,…]`` (``--function``)."""
    out = []
    for item in filter(None, (x.strip() for x in (spec or "").split(","))):
        name, _, target = item.partition("=")
        if not (name and target):
            raise FunctionError(f"function spec {item!r} is not name=module:function")
        out.append(from_module(name, target))
    return out


_DUCK_NAME = re.compile(PREFIX + r"(\w+?)_[0-9a-f]{10}\b", re.I)


def shown_names(text: str) -> str:
    """``text`` with each function's DuckDB name as the name it was called by.

    >>> shown_names("function py_count_char_0123456789(VARCHAR, BIGINT) does not exist")
    'function count_char(VARCHAR, BIGINT) does not exist'
    """
    return _DUCK_NAME.sub(lambda m: m.group(1).lower(), text)


def error_message(message: str) -> str | None:
    """The Python error inside DuckDB's message about a function of this module, or None."""
    marker = "Python exception occurred while executing the UDF: "
    if marker not in message:
        return None
    return message.split(marker, 1)[1].strip()
