"""The CQL parser: Postgres's, plus windows after stream references, ``Stream(x)``, the
TelegraphCQ WINDOW clause, the StreaQueL loop and the stream DDL. Additions go through the
dispatch tables (``QUERY_MODIFIER_PARSERS``, ``CONSTRAINT_PARSERS``, ``STREAM_CREATABLES``);
the few overridden methods fall back to Postgres's parsing when the input is not CQL.
"""
from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokens import TokenType

from . import expressions as X
from . import flink

# Semicolons nested in parentheses or braces (the StreaQueL loop header and body) are retyped
# by the tokenizer so that they do not end the statement; this is the type they get.
LOOP_SEMICOLON = TokenType.SETTINGS

# EXPLAIN ( … )'s Boolean options, as PostgreSQL 18 has them, and the words of their values
EXPLAIN_SWITCHES = ("ANALYZE", "VERBOSE", "COSTS", "SETTINGS", "GENERIC_PLAN", "BUFFERS", "WAL",
                    "TIMING", "SUMMARY", "MEMORY")
BOOLEAN_WORDS = {None: True, "TRUE": True, "ON": True, "YES": True, "1": True,
                 "FALSE": False, "OFF": False, "NO": False, "0": False}
NAME_WORD = re.compile(r"[^\W\d][\w$]*")       # an unquoted name (or a keyword), any script
# tokens whose text is a value, never a name, whatever it spells
LITERAL_TOKENS = frozenset({
    TokenType.STRING, TokenType.NUMBER, TokenType.HEREDOC_STRING, TokenType.NATIONAL_STRING,
    TokenType.RAW_STRING, TokenType.BIT_STRING, TokenType.HEX_STRING, TokenType.BYTE_STRING,
    TokenType.UNICODE_STRING, TokenType.PARAMETER, TokenType.PLACEHOLDER})
OVERLOAD_POLICIES = ("BLOCK", "DROP", "KEEP COUNTS", "KEEP SAMPLE")
# a pattern's selection strategies (SASE+), as written after USING -> the plan's name
STRATEGIES = {"SKIP TILL ANY MATCH": "any", "SKIP TILL NEXT MATCH": "next",
              "STRICT CONTIGUITY": "strict"}
STRATEGY_WORDS = {w for s in STRATEGIES for w in s.split()}


class CQLParser(PostgresParser):
    CONSTRAINT_PARSERS = {
        **PostgresParser.CONSTRAINT_PARSERS,
        "TIMESTAMPCOLUMN": lambda self: self.expression(X.TimestampColumnConstraint()),
        "ENDTIMESTAMPCOLUMN": lambda self: self.expression(
            X.TimestampColumnConstraint(end=True)),
    }

    # glob('pattern') is DuckDB's table function (listing files), not GLOB's operator form: read
    # as a plain call, so the gateway sees it and says who may use it
    FUNCTIONS = {
        **PostgresParser.FUNCTIONS,
        "GLOB": lambda args: exp.Glob(this=args[0], expression=args[1]) if len(args) == 2
        else exp.Anonymous(this="glob", expressions=args),
        **flink.FUNCTIONS,      # Flink's DATE_FORMAT, SPLIT_INDEX, REGEXP_EXTRACT
    }

    STATEMENT_PARSERS = {
        **PostgresParser.STATEMENT_PARSERS,
        TokenType.DESCRIBE: lambda self: self._parse_explain(),
    }

    QUERY_MODIFIER_PARSERS = {
        **PostgresParser.QUERY_MODIFIER_PARSERS,
        TokenType.FOR: lambda self: self._parse_for_modifier(),
        # WITH (recall = 0.95, …) after a SELECT: its join's quality target (seed 003)
        TokenType.WITH: lambda self: ("join_options", self._parse_join_options()),
    }

    # CREATE <kind>: the statement parser for each stream object (the leading word's text)
    STREAM_CREATABLES = {
        "STREAM": lambda self: self._parse_create_stream(),
        "WINDOW": lambda self: self._parse_create_window(),
        "WRAPPER": lambda self: self._parse_create_wrapper(),
        "SECRET": lambda self: self._parse_create_secret(),
        "SOURCE": lambda self: self._parse_create_source(),
        "SINK": lambda self: self._parse_create_sink(),
    }
    STREAM_DROPPABLES = ("STREAM", "WINDOW", "WRAPPER", "SOURCE", "SINK", "SECRET")
    CONNECTORS = ("POSTGRES", "PARQUET")       # the systems sources and sinks reach

    # ------------------------------------------------------------------ stream references
    def _parse_bracket(self, this=None):
        # After a table name a bracket opens a window, not a subscript: leave it to _parse_table.
        if isinstance(this, exp.Table) and self._curr \
                and self._curr.token_type == TokenType.L_BRACKET:
            return this
        return super()._parse_bracket(this)

    def _parse_table(self, *args, **kwargs):
        if not kwargs.get("schema") and self._at_event_seq():
            return self._parse_event_pattern()
        if not kwargs.get("schema") and self._at_window_table():
            return self._parse_window_table()
        this = super()._parse_table(*args, **kwargs)
        if isinstance(this, exp.Table) and isinstance(this.this, exp.Anonymous) \
                and this.this.name.upper() == "STREAM" and len(this.this.expressions) == 1:
            inner = this.this.expressions[0]
            table = exp.to_table(inner.sql(dialect="postgres")) \
                if isinstance(inner, (exp.Column, exp.Dot)) else inner
            alias = this.args.get("alias")
            this = X.StreamOf(this=table)
            if alias is not None:
                this = exp.Table(this=this, alias=alias)
        if this is not None and self._match(TokenType.L_BRACKET):
            window = self._parse_stream_window()
            alias = this.args.pop("alias", None) if isinstance(this, exp.Table) else None
            alias_first = alias is not None
            if alias is None:
                alias = self._parse_table_alias()
            if isinstance(this, exp.Table) and isinstance(this.this, X.StreamOf):
                this = this.this
            return self.expression(X.StreamRef(this=this, window=window, alias=alias,
                                               alias_first=alias_first or None))
        return this

    # ------------------------------------------------------------------ Flink's windows
    def _at_window_table(self) -> bool:
        """``TABLE(TUMBLE(`` (or HOP, CUMULATE, SESSION) next: a window table function."""
        t, i = self._tokens, self._index
        return (self._curr is not None and self._curr.token_type == TokenType.TABLE
                and i + 3 < len(t) and t[i + 1].token_type == TokenType.L_PAREN
                and t[i + 2].text.upper() in X.WINDOW_FUNCTIONS
                and t[i + 3].token_type == TokenType.L_PAREN)

    def _parse_window_table(self) -> X.WindowTable:
        """``TABLE(HOP(TABLE t [PARTITION BY k | (k, …)], DESCRIPTOR(c), slide, size))
        [AS] alias``, Flink's spelling of a window over a stream."""
        start = self._curr.start
        self._advance(2)                                # TABLE (
        function = self._curr.text.upper()
        self._advance(2)                                # TUMBLE (
        self._expect(TokenType.TABLE, f"TABLE before the stream {function} windows")
        table = self._parse_table_parts()
        partition = None
        if self._match(TokenType.PARTITION_BY) or self._match_text_seq("PARTITION", "BY"):
            partition = (self._parse_wrapped_csv(self._parse_column)
                         if self._curr.token_type == TokenType.L_PAREN
                         else [self._parse_column()])
        self._expect(TokenType.COMMA, "a comma before DESCRIPTOR")
        if not self._match_text_seq("DESCRIPTOR"):
            self.raise_error("Expected DESCRIPTOR(time column)")
        descriptor = self._parse_wrapped(self._parse_column)
        sizes = []
        while self._match(TokenType.COMMA):
            sizes.append(self._parse_bitwise())
        self._expect(TokenType.R_PAREN, f"the end of {function}(…)")
        self._expect(TokenType.R_PAREN, "the end of TABLE(…)")
        node = self.expression(X.WindowTable(this=table, function=function,
                                             partition_by=partition, descriptor=descriptor,
                                             expressions=sizes,
                                             alias=self._parse_table_alias()))
        node.meta["start"] = start
        return node

    # ------------------------------------------------------------------ event patterns
    def _at_event_seq(self) -> bool:
        """``EVENT SEQ (`` next (both words are plain identifiers to sqlglot)."""
        t, i = self._tokens, self._index
        return (self._curr is not None and self._curr.text.upper() == "EVENT"
                and i + 2 < len(t) and t[i + 1].text.upper() == "SEQ"
                and t[i + 2].token_type == TokenType.L_PAREN)

    def _parse_event_pattern(self) -> X.EventPattern:
        """``EVENT SEQ(A a, !(C c), …)`` then, optionally, its WITHIN and USING clauses."""
        start = self._curr.start
        for _ in range(3):                              # EVENT SEQ (
            self._advance()
        items = []
        while True:
            at = self._curr.start if self._curr is not None else start
            negated = self._match(TokenType.NOT)        # sqlglot reads '!' as NOT
            if negated:
                self._expect(TokenType.L_PAREN, "( after ! in SEQ")
            table = self._parse_table_parts()
            alias = self._parse_table_alias()
            if alias is not None:
                table.set("alias", alias)
            if negated:
                self._expect(TokenType.R_PAREN, ") to close !( … ) in SEQ")
            items.append(self.expression(X.PatternItem(this=table, negated=negated or None)))
            items[-1].meta["start"] = at
            if not self._match(TokenType.COMMA):
                break
        self._expect(TokenType.R_PAREN, ") to close SEQ( … )")
        node = self.expression(X.EventPattern(expressions=items))
        node.meta["start"] = start
        self._parse_pattern_clauses(node)
        return node

    def _parse_pattern_clauses(self, node: X.EventPattern) -> bool:
        """WITHIN size and USING <strategy>, in either order; whether any was there."""
        found = False
        while True:
            if self._match_text_seq("WITHIN"):
                if node.args.get("within") is not None:
                    self.raise_error("WITHIN is written twice")
                node.set("within", self._parse_window_interval())
            elif self._curr is not None and self._curr.token_type == TokenType.USING:
                self._advance()
                words = []
                while self._curr is not None and self._curr.text.upper() in STRATEGY_WORDS:
                    words.append(self._curr.text.upper())
                    self._advance()
                strategy = " ".join(words)
                if strategy not in STRATEGIES:
                    self.raise_error("Expected SKIP TILL ANY MATCH, SKIP TILL NEXT MATCH or "
                                     "STRICT CONTIGUITY after USING")
                node.set("strategy", strategy)
            else:
                return found
            found = True

    def _parse_query_modifiers(self, this):
        # a pattern's WITHIN and USING may also follow WHERE (as SASE writes them)
        this = super()._parse_query_modifiers(this)
        f = this.args.get("from_") if isinstance(this, exp.Select) else None
        if f is not None and isinstance(f.this, X.EventPattern) \
                and self._parse_pattern_clauses(f.this):
            this = super()._parse_query_modifiers(this)
        return this

    def _parse_statement(self):
        # SASE's bare statement, EVENT SEQ(…) WHERE … WITHIN …: a SELECT of every positive
        # component's columns (the planner names them alias_column)
        if self._at_event_seq():
            pattern = self._parse_event_pattern()
            pattern.set("bare", True)
            return self._parse_query_modifiers(self.expression(exp.Select(
                expressions=[exp.Star()], from_=exp.From(this=pattern))))
        return super()._parse_statement()

    # ------------------------------------------------------------------ MATCH_RECOGNIZE
    def _parse_match_recognize(self):
        """sqlglot's MATCH_RECOGNIZE, plus Flink's ``WITHIN INTERVAL …`` after PATTERN (…),
        which is lifted out of the tokens first and kept as the node's ``within``."""
        within = self._take_pattern_within() if self._curr is not None \
            and self._curr.token_type == TokenType.MATCH_RECOGNIZE else None
        node = super()._parse_match_recognize()
        if node is not None and within is not None:
            node.set("within", within)
        if node is not None and node.args.get("define") is None:
            node.set("define", [])          # sqlglot's generators need a list
        return node

    def _take_pattern_within(self) -> exp.Expression | None:
        """The tokens ``WITHIN <interval>`` between PATTERN (…) and DEFINE, removed and
        parsed on their own (sqlglot's MATCH_RECOGNIZE knows no WITHIN)."""
        tokens, i, depth = self._tokens, self._index + 1, 0
        while i < len(tokens):
            t = tokens[i]
            depth += (t.token_type == TokenType.L_PAREN) - (t.token_type == TokenType.R_PAREN)
            if depth == 0:
                return None                                  # the clause ended: no WITHIN
            if depth == 1 and t.text.upper() == "PATTERN":
                break
            i += 1
        else:
            return None
        j, inner = i + 1, 0                                  # past PATTERN's parentheses
        while j < len(tokens):
            inner += (tokens[j].token_type == TokenType.L_PAREN) \
                - (tokens[j].token_type == TokenType.R_PAREN)
            j += 1
            if inner == 0:
                break
        if j >= len(tokens) or tokens[j].text.upper() != "WITHIN":
            return None
        end = j + 1
        while end < len(tokens) and tokens[end].text.upper() != "DEFINE" \
                and tokens[end].token_type != TokenType.R_PAREN:
            end += 1
        if end == j + 1:
            self.raise_error("Expected an interval after WITHIN", tokens[j])
        here = self._index
        self._advance(j + 1 - here)                      # parse it where it stands …
        within = self._parse_window_interval()
        if self._index != end:
            self.raise_error("Expected an interval after WITHIN, such as INTERVAL '10' SECOND")
        self._retreat(here)                              # … then take it out
        del tokens[j:end]
        self._tokens_size = len(tokens)
        return within

    def _parse_window_interval(self) -> exp.Expression:
        """'2 minutes' | INTERVAL '1 day' | 2 sec | 10 | an expression (START AT, BETWEEN);
        None where a window's next word begins (``[RANGE SLIDE …]`` has no size)."""
        if self._curr and self._curr.text.upper() in ("SLIDE", "START", "WHERE"):
            return None
        if self._match(TokenType.NUMBER):
            number = exp.Literal.number(self._prev.text)
            if self._curr and self._curr.token_type not in (TokenType.R_BRACKET,) \
                    and self._curr.text.isalpha() \
                    and self._curr.text.upper() not in ("SLIDE", "START", "WHERE", "AND", "ON"):
                self._advance()
                return self.expression(X.UnitInterval(this=number,
                                                      unit=exp.var(self._prev.text)))
            return number
        return self._parse_bitwise()

    def _window_operand(self, parse, what: str) -> exp.Expression:
        """A window's size, count or edge, which ``[RANGE]``, ``[ROWS]``, ``[]`` lack."""
        node = parse()
        if node is None:
            self.raise_error(f"Expected {what} in the window")
        return node

    def _parse_stream_window(self) -> X.StreamWindow:
        """Everything between ``[`` (already matched) and ``]``."""
        bracket = self._prev
        spec: dict = {}
        size = lambda what: self._window_operand(self._parse_window_interval, what)  # noqa: E731
        edge = lambda what: self._window_operand(self._parse_bitwise, what)  # noqa: E731
        if self._match_text_seq("NOW"):
            spec["kind"] = "now"
        elif self._match_text_seq("UNBOUNDED"):
            spec["kind"] = "unbounded"
        elif self._match(TokenType.BETWEEN):
            spec.update(kind="between", low=edge("a timestamp after BETWEEN"))
            self._match(TokenType.AND) or self.raise_error("Expected AND in [BETWEEN ... AND ...]")
            spec["high"] = edge("a timestamp after AND")
        elif self._match(TokenType.PARTITION_BY) or self._match_text_seq("PARTITION", "BY"):
            spec["partition_by"] = self._parse_csv(self._parse_bitwise)
            if self._match_text_seq("SESSION"):
                spec.update(kind="session", size=size("a gap after SESSION"))
            else:
                self._parse_rows_window(spec)
        elif self._match_text_seq("SESSION"):
            spec.update(kind="session", size=size("a gap after SESSION"))
        elif self._match(TokenType.ROWS):
            self._retreat(self._index - 1)
            self._parse_rows_window(spec)
        elif self._match(TokenType.RANGE):
            if self._match_text_seq("UNBOUNDED"):
                spec.update(kind="unbounded", style="range")
            else:
                by = self._match_text_seq("BY")
                spec.update(kind="range", style="range_by" if by else "range",
                            size=size("a size after RANGE"))
                if self._match_text_seq("SLIDE"):
                    if by:
                        self._match_text_seq("BY")
                    spec.update(kind="slide", slide=size("a size after SLIDE"))
                if self._match_text_seq("START", "AT"):
                    spec["start"] = edge("a timestamp after START AT")
        else:
            spec.update(kind="range", style="short", size=size("a size, RANGE, ROWS, NOW, "
                                                                  "UNBOUNDED or BETWEEN"))
        if self._match_text_seq("ON", "ARRIVAL"):    # over arrival time (Flink's PROCTIME())
            spec["arrival"] = True
        if not self._match(TokenType.R_BRACKET):
            self.raise_error("Expected ] to close the window")
        node = self.expression(X.StreamWindow(**spec))
        node.meta["start"] = bracket.start      # where errors about the window point
        return node

    def _parse_rows_window(self, spec: dict) -> None:
        if not self._match(TokenType.ROWS):
            self.raise_error("Expected ROWS or SESSION in a partitioned window")
        spec.update(kind="rows", rows=self._window_operand(self._parse_bitwise,
                                                           "a count after ROWS"))
        if self._match(TokenType.WHERE):
            spec["where"] = self._parse_disjunction()
            if spec["where"] is None:
                self.raise_error("Expected a condition after WHERE in the window")

    # ------------------------------------------------------------------ WINDOW alias [...]
    def _parse_window_clause(self):
        if not self._match(TokenType.WINDOW):
            return None
        nxt = self._tokens[self._index + 1] if self._index + 1 < len(self._tokens) else None
        if nxt is not None and nxt.token_type == TokenType.L_BRACKET:
            return self._parse_csv(self._parse_stream_window_clause)
        return self._parse_csv(self._parse_named_window)

    def _parse_stream_window_clause(self) -> X.StreamWindowClause:
        alias = self._parse_id_var()
        if not self._match(TokenType.L_BRACKET):
            self.raise_error("Expected [ after the stream alias in WINDOW")
        return self.expression(X.StreamWindowClause(this=alias,
                                                    window=self._parse_stream_window()))

    def _parse_alias(self, this, explicit: bool = False):
        # PostgreSQL takes any keyword as a column label after AS (Metabase writes
        # `… AS select, … AS update`); sqlglot refuses its reserved words there
        after = self._tokens[self._index + 2] if self._index + 2 < len(self._tokens) else None
        if self._curr and self._curr.token_type == TokenType.ALIAS and self._next \
                and self._next.token_type in self.RESERVED_TOKENS \
                and self._next.text.isidentifier() \
                and (after is None or after.token_type in (TokenType.COMMA, TokenType.FROM,
                                                          TokenType.R_PAREN,
                                                          TokenType.SEMICOLON)):
            self._advance(2)
            return self.expression(exp.Alias(this=this,
                                             alias=exp.to_identifier(self._prev.text)))
        return super()._parse_alias(this, explicit)

    def _parse_types(self, *args, **kwargs):
        # regtype[] and the other OID-alias arrays (pgcli's function list casts to them):
        # sqlglot reads the OID alias but not an array of it; an array of its names' text
        this = super()._parse_types(*args, **kwargs)
        if isinstance(this, exp.ObjectIdentifier) and \
                self._match_pair(TokenType.L_BRACKET, TokenType.R_BRACKET):
            return exp.DataType.build("TEXT[]", dialect="postgres")
        return this

    # ------------------------------------------------------------------ StreaQueL loop
    def _parse_table_hints(self):
        # CQL has no T-SQL table hints: WITH ( after a stream's name begins the query's own
        # options (WITH (engine = spark), WITH (recall = …)), read as a query modifier
        if self._curr and self._curr.token_type == TokenType.WITH and self._next \
                and self._next.token_type == TokenType.L_PAREN:
            return None
        return super()._parse_table_hints()

    def _parse_join_options(self) -> list | None:
        if not (self._next and self._next.token_type == TokenType.L_PAREN):
            return None
        self._advance()
        return self._parse_stream_options()

    def _parse_for_modifier(self):
        if self._next and self._next.token_type == TokenType.L_PAREN:
            return "streaquel", self._parse_streaquel()
        return "locks", self._parse_locks()

    def _expect(self, token_type: TokenType, what: str) -> None:
        if not self._match(token_type):
            self.raise_error(f"Expected {what}")

    def _parse_streaquel(self) -> X.StreaQueLLoop:
        self._expect(TokenType.FOR, "for")
        self._expect(TokenType.L_PAREN, "( after for")
        var = self._parse_id_var()
        self._expect(TokenType.EQ, "= in the loop's start")
        init = self._parse_bitwise()
        self._expect(LOOP_SEMICOLON, "; after the loop's start")
        condition = self._parse_disjunction()
        self._expect(LOOP_SEMICOLON, "; after the loop's condition")
        step = self._parse_loop_step()
        self._expect(TokenType.R_PAREN, ") after the loop's step")
        self._expect(TokenType.L_BRACE, "{ before WindowIs")
        windows = []
        while not self._match(TokenType.R_BRACE):
            if not self._match_text_seq("WINDOWIS"):
                self.raise_error("Expected WindowIs(stream, left, right) in the loop body")
            self._expect(TokenType.L_PAREN, "( after WindowIs")
            stream = self._parse_table_parts()
            self._expect(TokenType.COMMA, ", after the stream in WindowIs")
            left = self._parse_bitwise()
            self._expect(TokenType.COMMA, ", after the left edge in WindowIs")
            right = self._parse_bitwise()
            self._expect(TokenType.R_PAREN, ") after WindowIs")
            windows.append(self.expression(X.WindowIs(this=stream, left=left, right=right)))
            self._match(LOOP_SEMICOLON)
        return self.expression(X.StreaQueLLoop(this=var, init=init, condition=condition,
                                               step=step, windows=windows))

    def _parse_loop_step(self) -> X.LoopStep:
        # (t-- cannot be offered: "--" starts a SQL comment; t -= 1 says the same)
        var = self._parse_id_var()
        if self._match(TokenType.PLUS):
            if self._match(TokenType.PLUS):
                return self.expression(X.LoopStep(this=var, op="++"))
            self._expect(TokenType.EQ, "++, += or = in the loop's step")
            return self.expression(X.LoopStep(this=var, op="+=", amount=self._parse_bitwise()))
        if self._match(TokenType.DASH):
            self._expect(TokenType.EQ, "-= in the loop's step")
            return self.expression(X.LoopStep(this=var, op="-=", amount=self._parse_bitwise()))
        self._expect(TokenType.EQ, "++, +=, -= or = in the loop's step")
        return self.expression(X.LoopStep(this=var, op="=", amount=self._parse_bitwise()))

    # ------------------------------------------------------------------ EXPLAIN, RECOMPUTE
    def _parse_explain(self):
        """EXPLAIN [ANALYZE] [VERBOSE] statement, or RECOMPUTE query (the tokenizer gives both
        words the DESCRIBE type so that the statement after them is tokenized, not kept as
        one string)."""
        word = self._prev.text.upper()
        if word == "RECOMPUTE":
            query = self._parse_statement()
            if not isinstance(query, exp.Query):
                self.raise_error("Expected a query after RECOMPUTE")
            return self.expression(X.Recompute(this=query))
        if word != "EXPLAIN":
            return self._parse_describe()
        options = []
        if self._match(TokenType.L_PAREN):
            options = self._parse_explain_options()
        while self._curr and self._curr.text.upper() in ("ANALYZE", "VERBOSE"):
            options.append(self._curr.text.upper())
            self._advance()
        name = self._running_query_name() if "ANALYZE" in options else None
        if name is not None:
            return self.expression(X.Explain(this=name, options=options))
        statement = self._parse_statement()
        if statement is None or isinstance(statement, exp.Condition):     # a value, a name
            self.raise_error("Expected a statement after EXPLAIN, or after EXPLAIN ANALYZE "
                             "the name of a running query")
        return self.expression(X.Explain(this=statement, options=options or None))

    def _ends_at(self, index: int) -> bool:
        """Whether the statement is over at token ``index``."""
        return index >= len(self._tokens) or \
            self._tokens[index].token_type in (TokenType.SEMICOLON, TokenType.SENTINEL)

    def _is_name_at(self, index: int) -> bool:
        token = self._tokens[index] if index < len(self._tokens) else None
        return token is not None and (
            token.token_type == TokenType.IDENTIFIER
            or (token.token_type not in LITERAL_TOKENS
                and NAME_WORD.fullmatch(token.text) is not None))

    def _running_query_name(self) -> X.RunningQueryName | None:
        """``name`` or ``schema.name`` as the whole rest of ``EXPLAIN ANALYZE``: the running
        query it names (None: a statement follows). A keyword is a name here, as a cursor may
        be called ``next``: no statement is one word."""
        i = self._index
        if self._is_name_at(i) and self._ends_at(i + 1):
            parts = [self._tokens[i]]
        elif self._is_name_at(i) and not self._ends_at(i + 1) \
                and self._tokens[i + 1].token_type == TokenType.DOT \
                and self._is_name_at(i + 2) and self._ends_at(i + 3):
            parts = [self._tokens[i], self._tokens[i + 2]]
        else:
            return None
        idents = [self.expression(exp.Identifier(
            this=t.text, quoted=t.token_type == TokenType.IDENTIFIER), t) for t in parts]
        self._advance(2 * len(parts) - 1)
        return self.expression(X.RunningQueryName(this=idents[-1],
                                                  db=idents[0] if len(idents) > 1 else None))

    def _parse_explain_options(self) -> list:
        """PostgreSQL's ``( option [value], … )`` after EXPLAIN, as words: ``ANALYZE`` and
        ``VERBOSE`` when on, ``TIMING OFF`` and the like for the other switches; the output
        is always text. An option given twice takes its last value."""
        options: dict = {}
        while True:
            if self._ends_at(self._index):
                self.raise_error("Expected an EXPLAIN option")
            word = self._curr.text.upper()
            self._advance()
            value = None
            if not self._ends_at(self._index) and \
                    self._curr.token_type not in (TokenType.COMMA, TokenType.R_PAREN):
                value = self._curr.text.upper()
                self._advance()
            if word == "FORMAT":
                if value != "TEXT":
                    self.raise_error("EXPLAIN's output is text: FORMAT TEXT, or no FORMAT")
            elif word not in EXPLAIN_SWITCHES:
                self.raise_error(f'unrecognized EXPLAIN option "{word.lower()}"')
            elif value not in BOOLEAN_WORDS:
                self.raise_error(f'EXPLAIN option {word} takes a Boolean value')
            else:
                options[word] = word if BOOLEAN_WORDS[value] else f"{word} OFF"
            if not self._match(TokenType.COMMA):
                break
        self._expect(TokenType.R_PAREN, ") after the EXPLAIN options")
        return list(options.values())

    # ------------------------------------------------------------------ DDL
    def _parse_create(self):
        word = self._curr.text.upper() if self._curr else ""
        parse = self.STREAM_CREATABLES.get(word)
        if parse is None:
            return super()._parse_create()
        self._advance()
        return parse(self)

    def _parse_stream_option(self) -> X.StreamOption:
        name = self._parse_id_var(any_token=True)
        self._expect(TokenType.EQ, "= in an option")
        value = self._parse_primary() or self._parse_id_var(any_token=True)
        return self.expression(X.StreamOption(this=name, value=value))

    def _parse_stream_options(self) -> list:
        self._expect(TokenType.L_PAREN, "( before the options")
        options = self._parse_csv(self._parse_stream_option)
        self._expect(TokenType.R_PAREN, ") after the options")
        return options

    def _parse_create_stream(self) -> X.CreateStream:
        exists = self._parse_exists(not_=True)
        name = self._parse_table_parts(schema=True)
        args: dict = {"exists": exists or None}
        if self._match(TokenType.ALIAS):
            args["expression"] = self._parse_select()
            return self.expression(X.CreateStream(this=name, **args))
        if self._match_text_seq("FROM", "SOURCE"):
            args["source"] = self._parse_id_var()
            if not self._match(TokenType.TABLE):
                self.raise_error("Expected TABLE after the source's name")
            args["source_table"] = self._parse_table_parts()
            this = name
        else:
            this = self._parse_schema(this=name)
        while True:
            if self._match_text_seq("TYPE"):
                if self._match_text_seq("ARCHIVED"):
                    args["archived"] = True
                elif self._match_text_seq("UNARCHIVED"):
                    args["archived"] = False
                else:
                    self.raise_error("Expected ARCHIVED or UNARCHIVED after TYPE")
            elif self._match(TokenType.WITH):
                args["options"] = self._parse_stream_options()
            elif self._match(TokenType.PARTITION_BY):             # PARTITIONED BY
                self._expect(TokenType.L_PAREN, "( before the partitioning columns")
                args["partitioned_by"] = self._parse_csv(self._parse_id_var)
                self._expect(TokenType.R_PAREN, ") after the partitioning columns")
            elif self._match_text_seq("ON", "OVERLOAD"):
                for policy in OVERLOAD_POLICIES:
                    if self._match_text_seq(*policy.split()):
                        args["overload"] = policy
                        break
                else:
                    self.raise_error("Expected BLOCK, DROP, KEEP COUNTS or KEEP SAMPLE")
            else:
                break
        return self.expression(X.CreateStream(this=this, **args))

    def _parse_create_window(self) -> X.CreateWindow:
        exists = self._parse_exists(not_=True)
        name = self._parse_table_parts(schema=True)
        self._expect(TokenType.ALIAS, "AS after the window's name")
        return self.expression(X.CreateWindow(this=name, exists=exists or None,
                                              expression=self._parse_select()))

    def _parse_create_secret(self) -> X.CreateSecret:
        exists = self._parse_exists(not_=True)
        name = self._parse_id_var()
        self._expect(TokenType.ALIAS, "AS after the secret's name")
        value = self._parse_primary()
        if not (isinstance(value, exp.Literal) and value.is_string):
            self.raise_error("Expected the secret's value as a string")
        return self.expression(X.CreateSecret(this=name, exists=exists or None,
                                              expression=value))

    def _connector(self) -> str:
        word = self._curr.text.upper() if self._curr else ""
        if word not in self.CONNECTORS:
            self.raise_error("Expected " + " or ".join(self.CONNECTORS))
        self._advance()
        return word

    def _parse_connector_option(self) -> X.StreamOption:
        """``NAME 'value'``, ``NAME = 'value'`` or ``NAME SECRET s`` (Materialize's spelling)."""
        name = self._parse_id_var(any_token=True)
        self._match(TokenType.EQ)
        if self._match_text_seq("SECRET"):
            value = self.expression(X.SecretRef(this=self._parse_id_var()))
        else:
            value = self._parse_primary() or self._parse_id_var(any_token=True)
        return self.expression(X.StreamOption(this=name, value=value))

    def _parse_connector_options(self) -> list:
        self._expect(TokenType.L_PAREN, "( before the options")
        options = self._parse_csv(self._parse_connector_option)
        self._expect(TokenType.R_PAREN, ") after the options")
        return options

    def _parse_create_source(self) -> X.CreateSource:
        exists = self._parse_exists(not_=True)
        name = self._parse_id_var()
        if not self._match(TokenType.FROM):
            self.raise_error("Expected FROM after the source's name")
        kind = self._connector()
        return self.expression(X.CreateSource(this=name, exists=exists or None, kind=kind,
                                              options=self._parse_connector_options()))

    def _parse_create_sink(self) -> X.CreateSink:
        exists = self._parse_exists(not_=True)
        name = self._parse_id_var()
        if not self._match(TokenType.INTO):
            self.raise_error("Expected INTO after the sink's name")
        kind = self._connector()
        options = self._parse_connector_options()
        self._expect(TokenType.ALIAS, "AS before the sink's query")
        if self._match(TokenType.TABLE):         # AS TABLE d: every row of d
            query = exp.select("*").from_(self._parse_table_parts())
        else:
            query = self._parse_select()
        return self.expression(X.CreateSink(this=name, exists=exists or None, kind=kind,
                                            options=options, expression=query))

    def _parse_create_wrapper(self) -> X.CreateWrapper:
        name = self._parse_id_var()
        return self.expression(X.CreateWrapper(this=name, options=self._parse_stream_options()))

    def _parse_drop(self, exists: bool = False, kind: str | None = None):
        word = self._curr.text.upper() if self._curr else ""
        if word not in self.STREAM_DROPPABLES:
            return super()._parse_drop(exists=exists, kind=kind)
        self._advance()
        if_exists = self._parse_exists()
        name = self._parse_table_parts()
        cascade = True if self._match_text_seq("CASCADE") else (
            False if self._match_text_seq("RESTRICT") else None)
        return self.expression(X.DropStreamObject(this=name, kind=word, exists=if_exists or None,
                                                  cascade=cascade))

    def _parse_alter(self):
        if not (self._curr and self._curr.text.upper() == "STREAM"):
            return super()._parse_alter()
        self._advance()
        name = self._parse_table_parts()
        if self._match_text_seq("ADD", "WRAPPER"):
            return self.expression(X.AlterStream(this=name, action="ADD WRAPPER",
                                                 wrapper=self._parse_id_var()))
        if self._match_text_seq("ADD"):
            self._match_text_seq("COLUMN")
            return self.expression(X.AlterStream(this=name, action="ADD COLUMN",
                                                 column=self._parse_field_def()))
        if self._match(TokenType.SET):
            return self.expression(X.AlterStream(this=name, action="SET",
                                                 options=self._parse_stream_options()))
        if self._match_text_seq("ADVANCE", "TO"):
            return self.expression(X.AlterStream(this=name, action="ADVANCE",
                                                 to=self._parse_bitwise()))
        self.raise_error("Expected ADD WRAPPER, ADD COLUMN, SET or ADVANCE TO after ALTER "
                         "STREAM")
