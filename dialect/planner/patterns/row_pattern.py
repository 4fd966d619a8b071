"""MATCH_RECOGNIZE's PATTERN text as a tree the executor matches (plain tuples, so the plan
stays JSON): ``("var", name)``, ``("seq", items)``, ``("alt", branches)`` and
``("rep", item, low, high, greedy)`` (high None: no bound). Concatenation, alternation ``|``,
grouping and the quantifiers ``* + ? {n} {n,} {,m} {n,m}``, each reluctant with a trailing
``?``, as the SQL standard writes them; and cqgate's absent row ``!C`` (``("not", name)``),
which begins or ends a concatenation.

>>> parse("A B+? C")
('seq', (('var', 'A'), ('rep', ('var', 'B'), 1, None, False), ('var', 'C')))
>>> parse("(C | D){2}")
('rep', ('alt', (('var', 'C'), ('var', 'D'))), 2, 2, True)
"""
from __future__ import annotations

import re

from ...errors import PatternSyntax, Unsupported

_TOKEN = re.compile(r"\s*(?:(?P<var>[A-Za-z_][A-Za-z_0-9]*)|(?P<bound>\{\s*\d*\s*(?:,\s*\d*\s*)?\})"
                    r"|(?P<sym>\{-|-\}|[()|*+?^$!]))")
_BEYOND = {"{-": "exclusion {- … -}", "-}": "exclusion {- … -}", "^": "the anchor ^",
           "$": "the anchor $"}


class _Tokens:
    def __init__(self, text: str):
        self.items, pos = [], 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise PatternSyntax(f"PATTERN ({text}): cannot read {text[pos:].strip()!r}")
            kind = m.lastgroup
            value = m.group(kind).replace(" ", "")
            if kind == "sym" and value in _BEYOND:
                raise Unsupported(f"PATTERN ({text}): {_BEYOND[value]} is not supported",
                                  hint="Negation is written with EVENT SEQ(…, !(C c), …).")
            if kind == "var" and value.upper() == "PERMUTE":
                raise Unsupported(f"PATTERN ({text}): PERMUTE is not supported")
            self.items.append((kind, value.upper() if kind == "var" else value))
            pos = m.end()
        self.i, self.text = 0, text

    def peek(self):
        return self.items[self.i] if self.i < len(self.items) else (None, None)

    def take(self):
        item = self.peek()
        self.i += 1
        return item


def parse(text: str) -> tuple:
    tokens = _Tokens(text)
    tree = _alt(tokens)
    if tokens.peek()[0] is not None:
        raise PatternSyntax(f"PATTERN ({text}): unexpected {tokens.peek()[1]}")
    return tree


def _alt(t: _Tokens) -> tuple:
    branches = [_seq(t)]
    while t.peek() == ("sym", "|"):
        t.take()
        branches.append(_seq(t))
    return branches[0] if len(branches) == 1 else ("alt", tuple(branches))


def _seq(t: _Tokens) -> tuple:
    items = []
    while t.peek()[0] == "var" or t.peek() in (("sym", "("), ("sym", "!")):
        if t.peek() == ("sym", "!"):          # cqgate's absent row: !C
            t.take()
            kind, value = t.take()
            if kind != "var" or t.peek()[0] in ("bound",) or t.peek() in (
                    ("sym", "*"), ("sym", "+"), ("sym", "?")):
                raise PatternSyntax(f"PATTERN ({t.text}): ! is followed by one variable, "
                                    "with no quantifier")
            items.append(("not", value))
            continue
        items.append(_quantified(t))
    if not items:
        raise PatternSyntax(f"PATTERN ({t.text}): expected a variable or ( here")
    return items[0] if len(items) == 1 else ("seq", tuple(items))


def _quantified(t: _Tokens) -> tuple:
    kind, value = t.take()
    if kind == "var":
        atom = ("var", value)
    else:
        atom = _alt(t)
        if t.take() != ("sym", ")"):
            raise PatternSyntax(f"PATTERN ({t.text}): a ( is not closed")
    while True:
        kind, value = t.peek()
        bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(value) \
            if kind == "sym" else _braces(value, t.text) if kind == "bound" else None
        if bounds is None:
            return atom
        t.take()
        greedy = True
        if t.peek() == ("sym", "?"):
            t.take()
            greedy = False
        atom = ("rep", atom, bounds[0], bounds[1], greedy)


def _braces(value: str, text: str) -> tuple:
    inner = value[1:-1]
    if inner in ("", ","):
        raise PatternSyntax(f"PATTERN ({text}): {value} needs a bound, as in {{2}} or {{1,3}}")
    if "," not in inner:
        low = high = int(inner)
    else:
        a, b = inner.split(",", 1)
        low, high = int(a) if a else 0, int(b) if b else None
    if high is not None and high < low:
        raise PatternSyntax(f"PATTERN ({text}): {value} has its bounds the wrong way round")
    return low, high


def variables(tree: tuple) -> list:
    """The pattern's variables, each once, in the order they first appear."""
    return list(dict.fromkeys(_leaves(tree)))


def can_be_empty(tree: tuple) -> bool:
    kind = tree[0]
    if kind == "var":
        return False
    if kind == "not":
        return True
    if kind == "seq":
        return all(can_be_empty(n) for n in tree[1])
    if kind == "alt":
        return any(can_be_empty(n) for n in tree[1])
    return tree[2] == 0 or can_be_empty(tree[1])


def is_concatenation(tree: tuple) -> bool:
    """One row per variable, each variable once, absent rows (!C) included: what EVENT
    SEQ's stacks run."""
    items = tree[1] if tree[0] == "seq" else (tree,)
    names = [n[1] for n in items if n[0] in ("var", "not")]
    return len(names) == len(items) and len(set(names)) == len(names)


def items(tree: tuple) -> list:
    """A concatenation's items: (variable, absent?)."""
    return [(n[1], n[0] == "not") for n in (tree[1] if tree[0] == "seq" else (tree,))]


def has_absent(tree: tuple) -> bool:
    if tree[0] == "not":
        return True
    if tree[0] in ("seq", "alt"):
        return any(has_absent(n) for n in tree[1])
    return tree[0] == "rep" and has_absent(tree[1])


def first_row_is(tree: tuple, var: str, only: bool = False) -> bool:
    """Every match's first row is ``var``'s (``only``: and no other row is): where AFTER
    MATCH SKIP TO FIRST (LAST) ``var`` would begin the next match where this one began.

    >>> first_row_is(parse("A+ B"), "A"), first_row_is(parse("A+ B"), "A", only=True)
    (True, False)
    >>> first_row_is(parse("A? B"), "A"), first_row_is(parse("A B C"), "A", only=True)
    (False, True)
    """
    if tree[0] == "seq" and tree[1][0][0] == "not":      # an absent row is no row of it
        rest = tree[1][1:]
        tree = rest[0] if len(rest) == 1 else ("seq", rest)
    if only:
        occurs = sum(1 for v in _leaves(tree) if v == var)
        lead = tree[1][0] if tree[0] == "seq" else tree
        return occurs == 1 and lead == ("var", var)
    kind = tree[0]
    if kind == "var":
        return tree[1] == var
    if kind == "seq":
        return first_row_is(tree[1][0], var) and not can_be_empty(tree[1][0])
    if kind == "alt":
        return all(first_row_is(n, var) for n in tree[1])
    return kind == "rep" and tree[2] >= 1 and first_row_is(tree[1], var)


def _leaves(tree: tuple):
    if tree[0] in ("var", "not"):
        yield tree[1]
    elif tree[0] in ("seq", "alt"):
        for n in tree[1]:
            yield from _leaves(n)
    else:
        yield from _leaves(tree[1])
