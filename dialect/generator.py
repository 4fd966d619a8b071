"""The CQL generator: Postgres's, plus one ``<node>_sql`` method per node of
``dialect/expressions.py``, so every statement and window form prints back as written."""
from __future__ import annotations

from sqlglot import exp
from sqlglot.generators.postgres import PostgresGenerator

from . import expressions as X
from .window_kinds import KINDS


class CQLGenerator(PostgresGenerator):
    TYPE_MAPPING = {**PostgresGenerator.TYPE_MAPPING, exp.DType.UINT: "OID"}

    def streamwindow_sql(self, e: X.StreamWindow) -> str:
        arrival = " ON ARRIVAL" if e.args.get("arrival") else ""
        return f"[{KINDS[e.args['kind']].text(self, e)}{arrival}]"

    def streamref_sql(self, e: X.StreamRef) -> str:
        alias = self.sql(e, "alias")
        window = self.sql(e, "window")
        if alias and e.args.get("alias_first"):
            return f"{self.sql(e, 'this')} {alias} {window}"
        return f"{self.sql(e, 'this')} {window}" + (f" AS {alias}" if alias else "")

    def windowtable_sql(self, e: X.WindowTable) -> str:
        part = e.args.get("partition_by")
        data = f"TABLE {self.sql(e, 'this')}" + (
            f" PARTITION BY ({self.expressions(e, key='partition_by', flat=True)})"
            if part else "")
        args = ", ".join([data, f"DESCRIPTOR({self.sql(e, 'descriptor')})"]
                         + [self.sql(x) for x in e.expressions])
        alias = self.sql(e, "alias")
        return f"TABLE({e.args['function']}({args}))" + (f" AS {alias}" if alias else "")

    def streamof_sql(self, e: X.StreamOf) -> str:
        return f"Stream({self.sql(e, 'this')})"

    def unitinterval_sql(self, e: X.UnitInterval) -> str:
        return f"{self.sql(e, 'this')} {self.sql(e, 'unit')}"

    def streamwindowclause_sql(self, e: X.StreamWindowClause) -> str:
        return f"{self.sql(e, 'this')} {self.sql(e, 'window')}"

    def loopstep_sql(self, e: X.LoopStep) -> str:
        var, op = self.sql(e, "this"), e.args["op"]
        if op == "++":
            return f"{var}++"
        return f"{var} {op} {self.sql(e, 'amount')}"

    def windowis_sql(self, e: X.WindowIs) -> str:
        return (f"WindowIs({self.sql(e, 'this')}, {self.sql(e, 'left')}, "
                f"{self.sql(e, 'right')})")

    def streaquelloop_sql(self, e: X.StreaQueLLoop) -> str:
        body = "; ".join(self.sql(w) for w in e.args["windows"])
        return (f"for ({self.sql(e, 'this')} = {self.sql(e, 'init')}; "
                f"{self.sql(e, 'condition')}; {self.sql(e, 'step')}) {{ {body} }}")

    def eventpattern_sql(self, e: X.EventPattern) -> str:
        sql = f"EVENT SEQ({self.expressions(e, flat=True)})"
        if e.args.get("within") is not None:
            sql += f" WITHIN {self.sql(e, 'within')}"
        if e.args.get("strategy"):
            sql += f" USING {e.args['strategy']}"
        return sql

    def patternitem_sql(self, e: X.PatternItem) -> str:
        item = self.sql(e, "this")
        return f"!({item})" if e.args.get("negated") else item

    def matchrecognize_sql(self, e: exp.MatchRecognize) -> str:
        sql = super().matchrecognize_sql(e)
        within = e.args.get("within")
        if within is None:
            return sql
        pattern = f"PATTERN ({self.sql(e, 'pattern')})"
        return sql.replace(pattern, f"{pattern} WITHIN {self.sql(within)}", 1)

    def select_sql(self, e: exp.Select) -> str:
        sql = super().select_sql(e)
        f = e.args.get("from_")
        if f is not None and isinstance(f.this, X.EventPattern) and f.this.args.get("bare") \
                and sql.startswith("SELECT * FROM "):
            sql = sql[len("SELECT * FROM "):]          # SASE's bare statement, as written
        loop = e.args.get("streaquel")
        sql = f"{sql} {self.sql(loop)}" if loop is not None else sql
        if e.args.get("join_options"):
            sql += f" WITH {self._options(e, 'join_options')}"
        return sql

    def explain_sql(self, e: X.Explain) -> str:
        options = e.args.get("options") or []
        if any(o not in ("ANALYZE", "VERBOSE") for o in options):   # PostgreSQL's ( … ) form
            return f"EXPLAIN ({', '.join(options)}) {self.sql(e, 'this')}"
        opts = " ".join(options)
        return f"EXPLAIN {opts + ' ' if opts else ''}{self.sql(e, 'this')}"

    def runningqueryname_sql(self, e: X.RunningQueryName) -> str:
        db = self.sql(e, "db")
        return f"{db}.{self.sql(e, 'this')}" if db else self.sql(e, "this")

    def recompute_sql(self, e: X.Recompute) -> str:
        return f"RECOMPUTE {self.sql(e, 'this')}"

    def timestampcolumnconstraint_sql(self, e: X.TimestampColumnConstraint) -> str:
        return "ENDTIMESTAMPCOLUMN" if e.args.get("end") else "TIMESTAMPCOLUMN"

    def streamoption_sql(self, e: X.StreamOption) -> str:
        return f"{self.sql(e, 'this')} = {self.sql(e, 'value')}"

    def _options(self, e: exp.Expression, key: str = "options") -> str:
        return f"({self.expressions(e, key=key, flat=True)})"

    def createstream_sql(self, e: X.CreateStream) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        sql = f"CREATE STREAM{exists} {self.sql(e, 'this')}"
        if e.args.get("expression") is not None:
            return f"{sql} AS {self.sql(e, 'expression')}"
        if e.args.get("source") is not None:
            sql += f" FROM SOURCE {self.sql(e, 'source')} TABLE {self.sql(e, 'source_table')}"
        archived = e.args.get("archived")
        if archived is not None:
            sql += " TYPE ARCHIVED" if archived else " TYPE UNARCHIVED"
        if e.args.get("options"):
            sql += f" WITH {self._options(e)}"
        if e.args.get("overload"):
            sql += f" ON OVERLOAD {e.args['overload']}"
        if e.args.get("partitioned_by"):
            sql += " PARTITIONED BY (" + ", ".join(self.sql(c) for c in e.args["partitioned_by"]) \
                + ")"
        return sql

    def createsecret_sql(self, e: X.CreateSecret) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        return f"CREATE SECRET{exists} {self.sql(e, 'this')} AS {self.sql(e, 'expression')}"

    def secretref_sql(self, e: X.SecretRef) -> str:
        return f"SECRET {self.sql(e, 'this')}"

    def createsource_sql(self, e: X.CreateSource) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        return f"CREATE SOURCE{exists} {self.sql(e, 'this')} FROM {e.args['kind']} " \
            f"{self._options(e)}"

    def createsink_sql(self, e: X.CreateSink) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        return f"CREATE SINK{exists} {self.sql(e, 'this')} INTO {e.args['kind']} " \
            f"{self._options(e)} AS {self.sql(e, 'expression')}"

    def createwindow_sql(self, e: X.CreateWindow) -> str:
        exists = " IF NOT EXISTS" if e.args.get("exists") else ""
        return f"CREATE WINDOW{exists} {self.sql(e, 'this')} AS {self.sql(e, 'expression')}"

    def createwrapper_sql(self, e: X.CreateWrapper) -> str:
        return f"CREATE WRAPPER {self.sql(e, 'this')} {self._options(e)}"

    def dropstreamobject_sql(self, e: X.DropStreamObject) -> str:
        exists = " IF EXISTS" if e.args.get("exists") else ""
        cascade = {True: " CASCADE", False: " RESTRICT", None: ""}[e.args.get("cascade")]
        return f"DROP {e.args['kind']}{exists} {self.sql(e, 'this')}{cascade}"

    def alterstream_sql(self, e: X.AlterStream) -> str:
        action = e.args["action"]
        target = {"ADD WRAPPER": lambda: self.sql(e, "wrapper"),
                  "ADD COLUMN": lambda: self.sql(e, "column"),
                  "SET": lambda: self._options(e),
                  "ADVANCE": lambda: "TO " + self.sql(e, "to")}[action]()
        return f"ALTER STREAM {self.sql(e, 'this')} {action} {target}"
