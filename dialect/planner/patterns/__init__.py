"""``FROM EVENT SEQ(...)`` to the algebra's pattern node (⊳): one scan per component, the
WHERE clause divided among them (each component's own predicate, the equivalence test
``[a, b]`` as its partition, the cross-event terms for construction and for the negations),
the window and the strategy; refused with a position and a hint when it cannot mean anything.

A pattern's WHERE belongs to the pattern: every term is decided on events, none on rows
after it. The result is a stream of matches, read as a bare stream is (its default window)."""
from __future__ import annotations

import re

from sqlglot import exp

from executor import plan as P

from ... import expressions as X
from ...errors import (DuplicateAlias, PatternSyntax, UndefinedColumn, UndefinedRelation,
                      Unsupported, written_at)
from ...parser import STRATEGIES
from ...window_kinds import apply_default_windows, size_us
from . import row_define, row_pattern
from ..push_down_filters import conjunction
from ..catalog import Relation
from ..scope import Scope, Source
from ..types import check_boolean


def pattern_source(builder, sel: exp.Select, pattern: X.EventPattern):
    """(the pattern's node under its default window, the scope of its positive components,
    {alias: window}) for ``builder.project``."""
    if sel.args.get("joins"):
        raise Unsupported("a pattern cannot be joined in the same SELECT",
                          hint="CREATE STREAM m AS SELECT … FROM EVENT SEQ(…) …; join m.",
                          position=written_at(sel.args["joins"][0]))
    if sel.args.get("streaquel") is not None or sel.args.get("windows"):
        raise Unsupported("a pattern takes no WINDOW clause or loop; its window is WITHIN",
                          position=written_at(pattern))
    items = pattern.expressions
    sources, negated = _components(builder, items)
    positive = [s for s, n in zip(sources, negated) if not n]
    if not positive:
        raise PatternSyntax("a pattern of negations only would match the empty sequence",
                            hint="Give SEQ at least one component without !( ).",
                            position=written_at(pattern))
    within = pattern.args.get("within")
    within_us = size_us(within) if within is not None else None
    if within_us is not None and within_us <= 0:
        raise PatternSyntax("WITHIN must be a positive interval", position=written_at(within))
    if within_us is None and (negated[0] or negated[-1]):
        where = "begins" if negated[0] else "ends"
        raise PatternSyntax(f"a pattern that {where} with a negation needs WITHIN",
                            hint="Nothing else bounds how long the absence must last: add "
                                 "WITHIN '10 seconds' (for example).",
                            position=written_at(items[0] if negated[0] else items[-1]))
    scope = Scope(sources)
    parts = _divide(builder, sel.args.get("where"), scope, sources, negated)
    equiv = _equivalence(builder, parts.pop("equivalence"), sources)
    order = {s.alias.lower(): i for i, s in enumerate(sources)}
    components = []
    for i, (src, neg) in enumerate(zip(sources, negated)):
        own = parts["own"].get(i, [])
        if neg:
            against = parts["negation"].get(i, [])
        else:           # the cross terms this component is the latest of (skip till next)
            against = [e for e in parts["cross"]
                       if max(order[a] for a in _aliases(e)) == i]
        components.append(P.PatternComponent(src.alias, neg, conjunction(own),
                                             tuple(e[i] for e in equiv), conjunction(against)))
    schema = tuple(c for s in positive for c in s.node.schema)
    strategy = STRATEGIES[pattern.args["strategy"]] if pattern.args.get("strategy") else "any"
    node = P.Pattern(tuple(s.node for s in sources), tuple(components),
                     conjunction(parts["cross"] + parts["constant"]), within_us, strategy, schema)
    window = apply_default_windows(None, None, has_end_column=False)
    if pattern.args.get("bare"):
        sel.set("expressions", [exp.alias_(exp.column(c, table=s.alias),
                                           f"{s.alias}_{c}", quoted=False)
                                for s in positive for c, _ in s.relation.columns])
    return (P.Window(node, window, schema), Scope(positive),
            {s.alias: window for s in positive})


def _components(builder, items: list) -> tuple[list, list]:
    sources, negated, seen = [], [], {}
    for item in items:
        table = item.this
        try:
            src, _ = builder.source(table, {})
        except UndefinedRelation as e:
            e.position = e.position or written_at(table)
            raise
        if not isinstance(src.node, (P.StreamScan, P.WindowRelationScan)) \
                or src.relation.kind == "table":
            raise Unsupported(f'"{src.relation.name}" is a table; a pattern reads streams, '
                              "named windows and derived streams", position=written_at(table))
        if isinstance(src.node, P.WindowRelationScan) and not src.node.follow:
            src.node = P.WindowRelationScan(src.node.name, src.node.alias, src.node.schema,
                                            src.node.kind, follow=True)
        key = src.alias.lower()
        if key in seen:
            raise DuplicateAlias(f'table name "{src.alias}" specified more than once',
                                 hint="Give each component of SEQ its own alias: "
                                      f"SEQ({src.relation.name} x1, {src.relation.name} x2).",
                                 position=written_at(table))
        seen[key] = True
        sources.append(src)
        negated.append(bool(item.args.get("negated")))
    return sources, negated


def _aliases(e: P.Expr) -> set:
    return {c.split(".", 1)[0].lower() for c in e.columns}


def _divide(builder, where, scope: Scope, sources: list, negated: list) -> dict:
    """WHERE's terms by what they name: one component (its own), positive ones (cross),
    a negated one with positive ones (its negation), none (constant); the ``[a, b]``
    terms apart."""
    parts = {"own": {}, "cross": [], "negation": {}, "constant": [], "equivalence": []}
    if where is None:
        return parts
    cond = where.this
    index = {s.alias.lower(): i for i, s in enumerate(sources)}
    terms = list(cond.flatten()) if isinstance(cond, exp.And) else [cond]
    for term in terms:
        while isinstance(term, exp.Paren):
            term = term.this
        if isinstance(term, exp.Array):
            parts["equivalence"].append(term)
            continue
        check_boolean(term, lambda c: scope.resolve(c)[1], "WHERE")
        e = builder.expr(term, scope.resolve)
        names = _aliases(e)
        negs = [index[a] for a in names if negated[index[a]]]
        if len(negs) > 1:
            raise Unsupported("a condition may name one negated component only",
                              hint="Each !( ) is checked on its own; split the condition.",
                              position=written_at(term))
        if not names:
            parts["constant"].append(e)
        elif len(names) == 1:
            parts["own"].setdefault(index[next(iter(names))], []).append(e)
        elif negs:
            parts["negation"].setdefault(negs[0], []).append(e)
        else:
            parts["cross"].append(e)
    return parts


def _equivalence(builder, arrays: list, sources: list) -> list:
    """``[a, b]``: per attribute, its value in every component (negated ones too)."""
    out = []
    for array in arrays:
        for attr in array.expressions:
            if not isinstance(attr, exp.Column) or attr.table:
                raise PatternSyntax("an equivalence test names attributes: [attr1, attr2]",
                                    hint="Write the bare column name every component has.",
                                    position=written_at(attr))
            row = []
            for s in sources:
                if s.relation.column_type(attr.name) is None:
                    raise UndefinedColumn(f'column {s.alias}.{attr.name} does not exist',
                                          hint=f"[{attr.name}] needs it in every component "
                                               "of SEQ.", position=written_at(attr))
                row.append(builder.expr(exp.column(attr.name, table=s.alias),
                                        Scope([s]).resolve))
            out.append(row)
    return out


# ---------------------------------------------------------------------- MATCH_RECOGNIZE
_SKIP = re.compile(r"AFTER MATCH SKIP (?:(PAST LAST ROW)|(TO NEXT ROW)|TO (FIRST|LAST) (\w+))$",
                   re.I)
# a variable's rows, when each variable is one row: these functions are the row's value
_ONE_ROW = {exp.First: lambda a: a, exp.Last: lambda a: a, exp.Sum: lambda a: a,
            exp.Min: lambda a: a, exp.Max: lambda a: a, exp.Avg: lambda a: a}


def match_recognize_source(builder, table: exp.Expression, match: exp.MatchRecognize):
    """``t MATCH_RECOGNIZE (…) AS m`` as a relation of its own (PARTITION BY columns, then
    MEASURES), for the SELECT around it. PATTERN is a concatenation of variables, one row
    each, rows consecutive in the partition: the pattern operator's strict contiguity, with
    PARTITION BY as its equivalence test and DEFINE as its predicates."""
    at = written_at(match)
    text = match.args["pattern"].name
    try:
        tree = row_pattern.parse(text)
    except (PatternSyntax, Unsupported) as e:
        e.position = e.position or at
        raise
    if row_pattern.can_be_empty(tree):
        raise PatternSyntax(f"PATTERN ({text}) can match no rows at all",
                            hint="Make at least one variable required (no *, ? or {0,…}).",
                            position=at)
    variables = row_pattern.variables(tree)
    defines = {d.alias.upper(): d.this for d in match.args.get("define") or []}
    for name in defines:
        if name not in variables:
            raise PatternSyntax(f'DEFINE names "{name}", which PATTERN does not use',
                                position=at)
    if match.args.get("rows") is not None and match.args["rows"].name != "ONE ROW PER MATCH":
        raise Unsupported(f"{match.args['rows'].name} is not supported yet",
                          hint="Write ONE ROW PER MATCH (the default).", position=at)
    skip = _skip(match, tree, at)
    if not row_pattern.is_concatenation(tree) or _needs_rows(match):
        if row_pattern.has_absent(tree):
            raise Unsupported(f"PATTERN ({text}): an absent row (!) goes with a concatenation "
                              "of variables", position=at,
                              hint="Write PATTERN (A B !C) or (!C A B), with no quantifier, "
                                   "alternation, CLASSIFIER(), MATCH_NUMBER(), or LAST, "
                                   "FIRST or PREV in DEFINE.")
        return _row_pattern_source(builder, table, match, tree, variables, defines, skip)
    absent = {v for v, neg in row_pattern.items(tree) if neg}
    order = [v for v, _ in row_pattern.items(tree)]
    if not absent <= {order[0], order[-1]} or absent >= set(order):
        raise Unsupported(f"PATTERN ({text}): an absent row (!) begins or ends the pattern",
                          hint="Between two variables nothing can lie anyway: their rows are "
                               "consecutive. EVENT SEQ(…) has negation in the middle.",
                          position=at)
    variables = order
    sources = []
    for var in variables:
        src, _ = builder.source(exp.Table(this=table.this.copy(), db=table.args.get("db"),
                                          alias=exp.TableAlias(this=exp.to_identifier(var))),
                                {})
        if src.relation.kind == "table":
            raise Unsupported(f'"{src.relation.name}" is a table; MATCH_RECOGNIZE reads a '
                              "stream here", position=written_at(table))
        sources.append(src)
    _check_order(match, sources[0], at)
    scope = Scope(sources)
    keys = _partition_keys(match)
    components, cross = [], []
    for var, src in zip(variables, sources):
        cond = defines.get(var)
        own, against = [], []
        if cond is not None:
            _refuse_navigation(cond, "DEFINE")
            cond = _qualified(cond, var, variables)
            check_boolean(cond, lambda c: scope.resolve(c)[1], "DEFINE")
            e = builder.expr(cond, scope.resolve)
            named = _aliases(e) - {var.lower()}
            if var not in absent and named & {a.lower() for a in absent}:
                raise Unsupported(f"DEFINE {var} names an absent row", position=written_at(
                    defines[var]), hint="Only the absent row's own DEFINE may compare it.")
            (own if not named else against).append(e)
            if var not in absent:
                cross += against
        partition = tuple(builder.expr(exp.column(k, table=var), Scope([src]).resolve)
                          for k in keys)
        components.append(P.PatternComponent(var, var in absent, conjunction(own), partition,
                                             conjunction(against)))
    within = match.args.get("within")
    within_us = size_us(within) if within is not None else None
    if absent and within_us is None:
        raise PatternSyntax(f"PATTERN ({text}): an absent row needs WITHIN", position=at,
                            hint="Nothing else bounds how long the absence must last: add "
                                 "WITHIN INTERVAL '10' SECOND (for example).")
    present = [v for v in variables if v not in absent]
    schema = tuple(c for v, s in zip(variables, sources) if v not in absent
                   for c in s.node.schema)
    node = P.Pattern(tuple(s.node for s in sources), tuple(components), conjunction(cross),
                     within_us, "strict", schema, skip[0], skip_to=skip[1])
    node = P.Window(node, apply_default_windows(None, None, has_end_column=False), schema)
    alias = match.alias or "match_recognize"
    seen = Scope([s for v, s in zip(variables, sources) if v not in absent])  # rows there
    outputs = [P.NamedExpr(f"{alias}.{k}", builder.expr(exp.column(k, table=present[0]),
                                                        seen.resolve)) for k in keys]
    for m in match.args.get("measures") or []:
        item = m.this
        if not isinstance(item, exp.Alias):
            raise PatternSyntax("each MEASURES item needs a name: expr AS name",
                                position=written_at(item))
        _refuse_navigation(item.this, "MEASURES", allowed=tuple(_ONE_ROW))
        value = _qualified(item.this.transform(_one_row), present[-1], present)
        outputs.append(P.NamedExpr(f"{alias}.{item.alias}", builder.expr(value, seen.resolve)))
    columns = tuple(P.Column(o.name, o.expr.type) for o in outputs)
    mapped = P.Map(node, tuple(outputs), columns)
    rel = Relation(alias, "subquery", tuple((c.name.split(".", 1)[1], c.type) for c in columns))
    return Source(alias, rel, mapped, True)


def _skip(match: exp.MatchRecognize, tree: tuple, at) -> tuple:
    """AFTER MATCH SKIP as (mode, variable): PAST LAST ROW by default. A skip to the
    variable of every match's first row would find the same match for ever: refused here
    when PATTERN says so, an error of the query when a match does."""
    after = match.args.get("after")
    m = _SKIP.match(after.name if after is not None else "AFTER MATCH SKIP PAST LAST ROW")
    if m is None:
        raise Unsupported(f"{after.name} is not supported", position=at,
                          hint="Write AFTER MATCH SKIP PAST LAST ROW, TO NEXT ROW or "
                               "TO FIRST/LAST variable.")
    if m.group(1) or m.group(2):
        return ("past_last" if m.group(1) else "all"), None
    first, var = m.group(3).upper() == "FIRST", m.group(4).upper()
    to = f"AFTER MATCH SKIP TO {m.group(3).upper()} {var}"
    if var not in row_pattern.variables(tree) or (var, True) in row_pattern.items(tree):
        raise PatternSyntax(f'{to}: "{var}" is not a variable PATTERN gives rows', position=at)
    if row_pattern.first_row_is(tree, var, only=not first):
        raise PatternSyntax(f"{to}: every match begins with {var}'s row, so the next match "
                            "would begin where this one began", position=at,
                            hint="Skip to a later variable, or TO NEXT ROW.")
    return ("to_first" if first else "to_last"), var


def _partition_keys(match: exp.MatchRecognize) -> list:
    """PARTITION BY's column names (columns only, unqualified)."""
    keys = []
    for p in match.args.get("partition_by") or []:
        if not isinstance(p, exp.Column) or p.table:
            raise Unsupported("PARTITION BY takes columns here", position=written_at(p))
        keys.append(p.name)
    return keys


def _check_order(match: exp.MatchRecognize, src, at) -> None:
    order = match.args.get("order")
    cols = order.expressions if order is not None else []
    ts = src.relation.timestamp_column
    if len(cols) != 1 or not isinstance(cols[0].this, exp.Column) or cols[0].args.get("desc") \
            or ts is None or cols[0].this.name.lower() != ts.lower():
        raise Unsupported("MATCH_RECOGNIZE over a stream is ordered by its event time",
                          hint=f"Write ORDER BY {ts}." if ts else None, position=at)


def _qualified(e: exp.Expression, var: str, variables: list) -> exp.Expression:
    """Unqualified columns name ``var``'s row (in DEFINE: the row being classified; in
    MEASURES: the match's last row); ``X.col`` names variable X's row."""
    def fix(node):
        if isinstance(node, exp.Column) and not node.table:
            return exp.column(node.name, table=var)
        if isinstance(node, exp.Column) and node.table.upper() in variables:
            return exp.column(node.name, table=node.table.upper())
        return node
    return e.copy().transform(fix)


def _one_row(node):
    """FIRST, LAST and aggregates over a one-row variable are its row's value."""
    f = _ONE_ROW.get(type(node))
    return f(node.this) if f is not None else node


def _refuse_navigation(e: exp.Expression, where: str, allowed: tuple = (),
                       calls: tuple = ()) -> None:
    for node in e.walk():
        name = node.name.upper() if isinstance(node, exp.Anonymous) else None
        if (name in ("PREV", "NEXT", "MATCH_NUMBER", "CLASSIFIER") and name not in calls) or (
                isinstance(node, (exp.First, exp.Last, exp.AggFunc, exp.Count))
                and not isinstance(node, allowed)):
            raise Unsupported(f"{node.sql('cql')} in {where} is not supported yet",
                              hint="Compare the variables' rows directly (B.v > A.v).",
                              position=written_at(node))


# ---------------------------------------------------------------------- a row pattern
ROWS = "__rows"                  # the one input's alias
MEASURED = "__m"                 # the operator's output, before MEASURES' expressions
_FUNCS = {exp.First: "first", exp.Last: "last", exp.Sum: "sum", exp.Min: "min",
          exp.Max: "max", exp.Avg: "avg", exp.Count: "count"}
_CALLS = {"CLASSIFIER": "classifier", "MATCH_NUMBER": "match_number"}


def _needs_rows(match: exp.MatchRecognize) -> bool:
    """MEASURES that only the row pattern's matcher gives (per match, not per row), or a
    DEFINE that navigates (LAST, FIRST, PREV): the stacks see one row per variable."""
    return any((isinstance(n, exp.Anonymous) and n.name.upper() in _CALLS)
               or isinstance(n, exp.Count) or (isinstance(n, (exp.First, exp.Last))
                                               and n.args.get("expression") is not None)
               for m in match.args.get("measures") or [] for n in m.walk()) or any(
        isinstance(n, (exp.First, exp.Last)) or (isinstance(n, exp.Anonymous)
                                                 and n.name.upper() == "PREV")
        for d in match.args.get("define") or [] for n in d.walk())


def _row_pattern_source(builder, table, match, tree, variables, defines, skip) -> Source:
    """Quantifiers, alternation, grouping: the pattern operator's row-pattern matcher over
    the stream's rows, each variable's DEFINE decided per row (it may name only the row
    itself), MEASURES taken apart into the values it computes per match."""
    at = written_at(match)
    src, _ = builder.source(exp.Table(this=table.this.copy(), db=table.args.get("db"),
                                      alias=exp.TableAlias(this=exp.to_identifier(ROWS))), {})
    if src.relation.kind == "table":
        raise Unsupported(f'"{src.relation.name}" is a table; MATCH_RECOGNIZE reads a stream '
                          "here", position=written_at(table))
    _check_order(match, src, at)
    scope = Scope([src])
    keys = _partition_keys(match)
    partition = tuple(builder.expr(exp.column(k, table=ROWS), scope.resolve) for k in keys)
    components = []
    for var in variables:
        cond = defines.get(var)
        pred = checks = None
        if cond is not None:
            _refuse_navigation(cond, "DEFINE", allowed=(exp.First, exp.Last), calls=("PREV",))
            # typed as SQL over one row, every row it reads taken as the input's
            whole = row_define.as_one_row(cond, ROWS)
            check_boolean(whole, lambda c: scope.resolve(c)[1], "DEFINE")
            builder.expr(whole, scope.resolve)
            own, elsewhere = row_define.split(cond, var)
            if own:
                pred = builder.expr(row_define.as_one_row(exp.and_(*own), ROWS),
                                    scope.resolve)
            if elsewhere:
                checks = row_define.tree(
                    exp.and_(*elsewhere), var, variables,
                    lambda name: scope.resolve(exp.column(name, table=ROWS))[0])
        components.append(P.PatternComponent(var, False, pred, partition, checks=checks))
    measures, atoms, outputs_sql = [], [], []
    for m in match.args.get("measures") or []:
        item = m.this
        if not isinstance(item, exp.Alias):
            raise PatternSyntax("each MEASURES item needs a name: expr AS name",
                                position=written_at(item))
        outputs_sql.append((item.alias, _atoms(item.this, variables, scope, atoms, at)))
    measures = tuple(a for a, _ in atoms)
    key_cols = [P.Column(f"{MEASURED}.{k}", t.type) for k, t in zip(keys, partition)]
    atom_cols = [P.Column(f"{MEASURED}.__m{i}", typ) for i, (_, typ) in enumerate(atoms)]
    schema = tuple(key_cols + atom_cols)
    within = match.args.get("within")
    node = P.Pattern((src.node,), tuple(components), None,
                     size_us(within) if within is not None else None, "strict", schema,
                     skip[0], tree, measures, skip[1])
    node = P.Window(node, apply_default_windows(None, None, has_end_column=False), schema)
    measured = Scope([Source(MEASURED, Relation(MEASURED, "subquery", tuple(
        (c.name.split(".", 1)[1], c.type) for c in schema)), node, True)])
    alias = match.alias or "match_recognize"
    outputs = [P.NamedExpr(f"{alias}.{k}", builder.expr(exp.column(k, table=MEASURED),
                                                        measured.resolve)) for k in keys]
    outputs += [P.NamedExpr(f"{alias}.{name}", builder.expr(e, measured.resolve))
                for name, e in outputs_sql]
    columns = tuple(P.Column(o.name, o.expr.type) for o in outputs)
    rel = Relation(alias, "subquery", tuple((c.name.split(".", 1)[1], c.type) for c in columns))
    return Source(alias, rel, P.Map(node, tuple(outputs), columns), True)


def _atoms(e: exp.Expression, variables: list, scope: Scope, atoms: list, at):
    """A MEASURES expression with each per-match value (FIRST/LAST/aggregates of a
    variable's column, a bare ``A.c`` = LAST(A.c), a bare ``c`` = the match's last row,
    CLASSIFIER(), MATCH_NUMBER()) replaced by a column of the operator's output."""
    def atom(measure: P.RowMeasure, typ: str) -> exp.Column:
        if (measure, typ) not in atoms:
            atoms.append((measure, typ))
        return exp.column(f"__m{atoms.index((measure, typ))}", table=MEASURED)

    def of(col: exp.Column) -> tuple:
        var = col.table.upper() if col.table else None
        if var is not None and var not in variables:
            raise UndefinedRelation(f'MEASURES names "{col.table}", which PATTERN does not use',
                                    position=written_at(col))
        return var, scope.resolve(exp.column(col.name, table=ROWS))

    def fix(node):
        if isinstance(node, exp.Anonymous) and node.name.upper() in _CALLS:
            func = _CALLS[node.name.upper()]
            return atom(P.RowMeasure(func), "VARCHAR" if func == "classifier" else "BIGINT")
        func = _FUNCS.get(type(node))
        if func is not None:
            arg = node.this
            if func == "count" and (isinstance(arg, exp.Star) or arg is None):
                return atom(P.RowMeasure("count"), "BIGINT")
            if not isinstance(arg, exp.Column):
                raise Unsupported(f"{node.sql('cql')}: MEASURES take a function of one "
                                  "variable's column here", position=written_at(node))
            var, (internal, typ) = of(arg)
            offset = row_define.offset(node, node.args.get("expression"), 0) \
                if func in ("first", "last") else 0
            name = internal.split(".", 1)[1]
            out = {"count": "BIGINT", "avg": "DOUBLE",
                   "sum": "DOUBLE" if typ in ("DOUBLE", "REAL", "FLOAT") else "BIGINT"}
            return atom(P.RowMeasure(func, var, internal, offset), out.get(func, typ))
        if isinstance(node, exp.Column):
            var, (internal, typ) = of(node)
            return atom(P.RowMeasure("last", var, internal), typ)
        return node
    _refuse_navigation(e, "MEASURES", allowed=tuple(_FUNCS), calls=tuple(_CALLS))
    return e.copy().transform(fix)
