"""Simple expressions run by Arrow's compute kernels instead of a DuckDB call (which costs about
2–3 ms a batch however small): the plan carries such an expression also as a small tree.

A ``Kernel`` answers exactly what DuckDB would, or raises ``Fallback`` (this batch's values need
DuckDB: a zero divisor, an overflow, a NaN compared) or ``Unsupported`` (these types are never
done here). DuckDB still decides every type: on the first batch it types each arithmetic step
of the tree (one call, over no rows), and each step's result is cast to that type, checked, so
an overflow DuckDB would report is a Fallback here. Tree nodes are tuples: ``("col", name)``,
``("int"|"dec"|"float"|"str", text)``, ``("bool", value)``, ``("null",)``,
``("cast", operand, "double")``, and an operator with its operands (``add sub mul div mod neg
eq ne lt le gt ge and or not is_null``).
"""
from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import duck


class Fallback(Exception):
    """This batch's values need DuckDB (its error, or a rule Arrow does not share)."""


class Unsupported(Exception):
    """This expression, over these types, is never evaluated here."""


def _int_literal(text: str) -> pa.Scalar:
    v = int(text)
    # DuckDB types an integer literal INTEGER when it fits, else BIGINT; the same widths here
    # make Arrow's checked arithmetic overflow where DuckDB's does
    for typ in (pa.int32(), pa.int64()):
        if -(1 << (typ.bit_width - 1)) <= v < 1 << (typ.bit_width - 1):
            return pa.scalar(v, typ)
    raise Unsupported(f"integer literal {text}")


def _dec_literal(text: str) -> pa.Scalar:
    digits = text.lstrip("-+")
    scale = len(digits.partition(".")[2])
    width = max(len(digits.replace(".", "")), scale + 1)     # DuckDB: 0.908 is DECIMAL(4,3)
    if width > 38:
        raise Unsupported(f"decimal literal {text}")
    return pa.scalar(decimal.Decimal(text), pa.decimal128(width, scale))


_LITERALS = {
    "int": _int_literal,
    "dec": _dec_literal,
    "float": lambda text: pa.scalar(float(text), pa.float64()),
    "str": lambda text: pa.scalar(text, pa.string()),
    "bool": lambda value: pa.scalar(bool(value), pa.bool_()),
    "null": lambda: pa.scalar(None, pa.null()),
}


def _type(v) -> pa.DataType:
    return v.type


def _numeric(*values) -> None:
    types = [_type(v) for v in values]
    for t in types:
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
            raise Unsupported(f"arithmetic on {t}")
    _not_mixed(types)


def _not_mixed(types: list) -> None:
    """Arrow turns a decimal into a double by another rounding than DuckDB's."""
    if any(map(pa.types.is_floating, types)) and any(map(pa.types.is_decimal, types)):
        raise Unsupported("decimal with floating point")


def _integers(*values) -> bool:
    return all(pa.types.is_integer(_type(v)) for v in values)


def _no_zero(divisor) -> None:
    if pc.any(pc.equal(divisor, 0)).as_py() if isinstance(divisor, pa.Array) \
            else divisor.is_valid and divisor.as_py() == 0:
        raise Fallback("division by zero")


def _arith(kernel):
    def run(a, b):
        _numeric(a, b)
        return kernel(a, b)
    return run


def _divide(a, b):
    _numeric(a, b)
    if not _integers(a, b):
        # DuckDB divides decimals to DOUBLE and floats by zero to an error: its rules, not these
        raise Unsupported("division of non-integers")
    _no_zero(b)
    return pc.divide_checked(a, b)          # integers: truncated toward zero, as DuckDB


def _modulo(a, b):
    _numeric(a, b)
    if not _integers(a, b):
        raise Unsupported("modulo of non-integers")
    _no_zero(b)
    # Arrow's modulo takes the divisor's sign; SQL's the dividend's: a − trunc(a / b) · b
    return pc.subtract_checked(a, pc.multiply_checked(pc.divide_checked(a, b), b))


def _floor_modulo(a, b):
    """``pmod``: the residue with the divisor's sign, ((a % b) + b) % b in SQL (Arrow's
    ``modulo``, one pass); what splits a key across back ends (gateway/link/shards.py)."""
    _numeric(a, b)
    if not _integers(a, b):
        raise Unsupported("modulo of non-integers")
    _no_zero(b)
    return pc.modulo(a, b)


def _to_double(a):
    """CAST(a AS DOUBLE) as DuckDB does it: a decimal's unscaled integer divided by 10^scale
    (Arrow's own cast rounds differently)."""
    t = _type(a)
    if pa.types.is_floating(t):
        return a.cast(pa.float64())
    if pa.types.is_integer(t):
        return a.cast(pa.float64())        # safe: beyond 2^53 it raises, and DuckDB decides
    if not pa.types.is_decimal(t) or t.bit_width != 128 or not isinstance(a, pa.Array):
        raise Unsupported(f"CAST({t} AS DOUBLE)")
    words = np.frombuffer(a.buffers()[1], np.int64)[2 * a.offset:2 * (a.offset + len(a))]
    low, high = words[0::2], words[1::2]
    valid = a.is_valid().to_numpy(zero_copy_only=False)
    if (high[valid] != low[valid] >> 63).any():
        raise Fallback("a decimal beyond 64 bits")   # DuckDB's 128-bit rounding, not this
    return pa.array(low.astype(np.float64) / 10.0 ** t.scale, pa.float64(), mask=~valid)


_CASTS = {"double": _to_double}


def _negate(a):
    _numeric(a)
    return pc.negate_checked(a)


def _nan_free(*values) -> None:
    """DuckDB orders NaN above every number and equal to itself; IEEE (Arrow) does not."""
    for v in values:
        if pa.types.is_floating(_type(v)):
            nan = pc.is_nan(v)
            if (pc.any(nan).as_py() if isinstance(v, pa.Array) else nan.as_py()):
                raise Fallback("NaN compared")


def _compare(kernel):
    def run(a, b):
        kinds = {_kind(a), _kind(b)}
        if len(kinds) != 1:
            raise Unsupported(f"comparison of {_type(a)} with {_type(b)}")
        _not_mixed([_type(a), _type(b)])
        _nan_free(a, b)
        return kernel(a, b)
    return run


def _kind(v) -> str:
    t = _type(v)
    for name, test in (("number", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)
                        or pa.types.is_decimal(t)),
                       ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
                       ("bool", pa.types.is_boolean), ("time", pa.types.is_timestamp)):
        if test(t):
            return name
    return str(t)


def _boolean(kernel):
    def run(*args):
        for a in args:
            if not pa.types.is_boolean(_type(a)):
                raise Unsupported(f"logic on {_type(a)}")
        return kernel(*args)
    return run


_OPERATORS = {
    "add": _arith(pc.add_checked),
    "sub": _arith(pc.subtract_checked),
    "mul": _arith(pc.multiply_checked),
    "div": _divide,
    "mod": _modulo,
    "pmod": _floor_modulo,
    "neg": _negate,
    "eq": _compare(pc.equal),
    "ne": _compare(pc.not_equal),
    "lt": _compare(pc.less),
    "le": _compare(pc.less_equal),
    "gt": _compare(pc.greater),
    "ge": _compare(pc.greater_equal),
    "and": _boolean(pc.and_kleene),
    "or": _boolean(pc.or_kleene),
    "not": _boolean(pc.invert),
    "is_null": pc.is_null,
}
_ARITHMETIC = ("add", "sub", "mul", "div", "mod", "pmod", "neg")
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "eq": "=", "ne": "<>",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "AND", "or": "OR"}


def _sql(tree) -> str:
    """The tree as DuckDB SQL, for DuckDB to type its steps."""
    op, *args = tree
    if op == "col":
        return duck.quote(args[0])
    if op == "str":
        return "'" + args[0].replace("'", "''") + "'"
    if op == "bool":
        return "TRUE" if args[0] else "FALSE"
    if op == "null":
        return "NULL"
    if op in _LITERALS:
        return args[0]
    if op == "cast":
        return f"CAST({_sql(args[0])} AS {args[1].upper()})"
    if op in _SYMBOLS:
        return f"({_sql(args[0])} {_SYMBOLS[op]} {_sql(args[1])})"
    if op == "pmod":
        a, b = _sql(args[0]), _sql(args[1])
        return f"((({a} % {b}) + {b}) % {b})"
    return {"neg": "(- {})", "not": "(NOT {})", "is_null": "({} IS NULL)"}[op].format(
        _sql(args[0]))


class Kernel:
    """A compiled tree. ``learn(batch, con)`` once (DuckDB types the steps over the batch's
    schema), then ``kernel(batch)`` for each batch. ``memo``, a dict shared by kernels over
    the same batch, computes a step they have in common once (the grouped filter's N queries
    that test ``bidder % N`` against different constants)."""

    def __init__(self, tree):
        self.steps: list = []                # SQL of each arithmetic step, typed by DuckDB
        self.types: list | None = None
        self.f = self._compile(tree)

    def learn(self, batch: pa.RecordBatch, con) -> None:
        if self.types is None:
            sql = "SELECT " + ", ".join(f"{s} AS s{i}" for i, s in enumerate(self.steps)) \
                + " FROM b" if self.steps else None
            self.types = duck.schema_of(con, "b", batch.schema, sql).types if sql else []

    def __call__(self, batch: pa.RecordBatch, memo: dict | None = None):
        return self.f(batch, memo)

    def _compile(self, tree):
        op, *args = tree
        if op == "col":
            name = args[0]
            return lambda batch, memo: batch.column(name)
        if op in _LITERALS:
            value = _LITERALS[op](*args)
            return lambda batch, memo: value
        if op == "cast":
            if args[1] not in _CASTS:
                raise Unsupported(f"cast to {args[1]}")
            kernel, operands = _CASTS[args[1]], [self._compile(args[0])]
        elif op in _OPERATORS:
            kernel, operands = _OPERATORS[op], [self._compile(a) for a in args]
        else:
            raise Unsupported(op)
        step = None
        if op in _ARITHMETIC:
            step = len(self.steps)
            self.steps.append(_sql(tree))

        def run(batch, memo):
            if memo is not None and tree in memo:
                return memo[tree]
            try:
                out = kernel(*(f(batch, memo) for f in operands))
                if step is not None and out.type != self.types[step]:
                    out = out.cast(self.types[step])     # checked: DuckDB's overflow too
                if memo is not None:
                    memo[tree] = out
                return out
            except pa.ArrowInvalid as e:                 # overflow: DuckDB says how
                raise Fallback(str(e)) from None
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise Unsupported(str(e)) from None
        return run


def mask(f, batch: pa.RecordBatch, memo: dict | None = None) -> pa.Array:
    """A predicate's value over ``batch`` as a boolean array (a constant is broadcast);
    ``memo``: see ``Kernel``."""
    out = f(batch, memo)
    if not pa.types.is_boolean(out.type):
        raise Unsupported(f"predicate of type {out.type}")
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, batch.num_rows)
    return out


def column(f, batch: pa.RecordBatch, typ: pa.DataType) -> pa.Array:
    """An output column over ``batch`` as DuckDB would type it (``typ``, learnt from DuckDB)."""
    out = f(batch)
    if isinstance(out, pa.Scalar):
        out = pa.repeat(out, batch.num_rows)
    if out.type == typ:
        return out
    try:
        return out.cast(typ)                          # safe: a value that does not fit raises
    except pa.ArrowInvalid as e:
        raise Fallback(str(e)) from None
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise Unsupported(str(e)) from None
