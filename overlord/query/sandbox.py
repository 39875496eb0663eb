"""The SQL sandbox: a query runs only if every node of its plan is on an allow-list.

The check walks Spark's own plan objects in the JVM (through py4j), never a rendering of them:
every field of every plan node and expression, into sequences, options, maps and tuples, so
subqueries, CTEs, window definitions (a map, which a plan's JSON renders as ``null``), lateral
views and hints are all seen. It runs twice:

1. on the **parsed** plan, before Spark analyses or runs anything: operators must be query
   operators (no command, ``SET``, insert, ``TRANSFORM ... USING``, ``EXECUTE IMMEDIATE``),
   functions on the allow-list of :mod:`overlord.query.function_bounds` (fail closed), table
   functions on :data:`TABLE_FUNCTIONS`, and functions that build large values (``repeat``,
   ``sequence``, ``format_string`` widths, ...) bounded by integer literals;
2. on the **analyzed** plan, before anything executes: operators on the analyzed allow-list,
   relations only the overlord's own datasource views, and expressions Catalyst built-ins
   (no user-defined function, no call into the JVM however the function was named), and every
   value's size, intermediate ones included, within a bound computed over the plan
   (:func:`overlord.query.function_bounds` explains how): ``concat(x, x)`` once per CTE level
   cannot build a value past :data:`~overlord.query.function_bounds.MAX_VALUE_SIZE`.

Class names are matched by their simple names, so the check does not depend on one Spark
version's plan serialisation; a node an allow-list does not know is refused (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from py4j.java_gateway import JavaObject

from overlord.query.collect_max_bytes import MAX_BYTES_MESSAGE
from overlord.query.druid_function_names import DRUID_SQL_FUNCTIONS, SPARK_NAMES
from overlord.query.function_bounds import (
    COLLECTING_CLASSES,
    COLUMN_SIZE,
    FILTER_CLASSES,
    FIXED_SIZE,
    LAMBDA_CLASSES,
    LARGEST_INPUT,
    MAX_BUILT_SIZE,
    MAX_VALUE_SIZE,
    MULTIPLIERS,
    SIZE_ARGUMENTS,
    format_widths,
    size_class,
    sized,
)
from overlord.query.query_errors import QueryError
from overlord.query.row_bounds import UNBOUNDED, RowBounds

__all__ = ["DENIED_FUNCTIONS", "MAX_BUILT_SIZE", "PlanWalker", "check_analyzed", "check_parsed", "relations"]

DENIED_FUNCTIONS = frozenset({
    "reflect", "java_method", "try_reflect",  # call any Java method
    "xpath", "xpath_boolean", "xpath_double", "xpath_float", "xpath_int", "xpath_long", "xpath_number",
    "xpath_short", "xpath_string", "from_xml", "schema_of_xml",  # XML parsers: external entities
})
"""Built-in functions a query may not call."""

TABLE_FUNCTIONS = frozenset({
    "range", "explode", "explode_outer", "inline", "inline_outer", "json_tuple", "posexplode", "posexplode_outer",
    "stack", "variant_explode", "variant_explode_outer",
})
"""Table-valued functions a query may use (``read_files`` and the like are not among them)."""

PARSED_OPERATORS = frozenset({
    "Aggregate", "Distinct", "Except", "Filter", "Generate", "GlobalLimit", "Intersect", "Join", "LateralJoin",
    "LocalLimit", "LocalRelation", "Offset", "OneRowRelation", "Pivot", "Project", "RepartitionByExpression",
    "Sample", "Sort", "SubqueryAlias", "Union", "Unpivot", "UnresolvedHaving", "UnresolvedHint",
    "UnresolvedInlineTable", "UnresolvedRelation", "UnresolvedSubqueryColumnAliases",
    "UnresolvedTableValuedFunction", "UnresolvedTVFAliases", "UnresolvedWith", "WithWindowDefinition",
})
"""Plan nodes Spark's parser produces for read-only queries."""

ANALYZED_OPERATORS = frozenset({
    "Aggregate", "CTERelationDef", "CTERelationRef", "Deduplicate", "Distinct", "Except", "Expand", "Filter",
    "Generate", "GlobalLimit", "Intersect", "Join", "LateralJoin", "LocalLimit", "LocalRelation", "Offset",
    "OneRowRelation", "Project", "Range", "RebalancePartitions", "Repartition", "RepartitionByExpression",
    "ResolvedHint", "Sample", "Sort", "SubqueryAlias", "Union", "View", "Window", "WithCTE",
})
"""Plan nodes of an analyzed read-only query (a ``View`` must be one of the overlord's datasource views)."""

DENIED_EXPRESSIONS = frozenset({"CallMethodViaReflection", "TryReflect", "ScriptTransformation"})
"""Catalyst expressions a query may not contain, whatever function name produced them."""

_EXPRESSIONS_PACKAGE = "org.apache.spark.sql.catalyst.expressions."
_AGGREGATES_PACKAGE = _EXPRESSIONS_PACKAGE + "aggregate."
SKETCH_READERS = frozenset({"ThetaUnionAgg", "HllUnionAgg", "KllMergeAggDouble"})
"""Aggregates that may read stored sketches (binary) or first/last pairs (``struct<lhs, rhs, offset>``); any other
would count or compare their bytes, an answer that looks like Druid's and is not."""


@dataclass(frozen=True)
class Node:
    """A plan node or expression found in a plan: its kind, simple class name and JVM object."""

    kind: str  # "plan" | "expression"
    name: str
    full_name: str
    obj: Any


class PlanWalker:
    """Walks plan objects in the JVM; knows the class hierarchy it needs (cached per class)."""

    def __init__(self, jvm: Any) -> None:
        self._name = jvm.org.apache.commons.lang3.ClassUtils.getName
        cls = jvm.java.lang.Class.forName
        self._types = [(kind, cls(name)) for kind, name in (
            ("plan", "org.apache.spark.sql.catalyst.plans.logical.LogicalPlan"),
            ("expression", "org.apache.spark.sql.catalyst.expressions.Expression"),
            ("udf", "org.apache.spark.sql.catalyst.expressions.UserDefinedExpression"),
            ("seq", "scala.collection.Seq"), ("iterable", "scala.collection.Iterable"),
            ("product", "scala.Product"))]
        self._kinds: dict[str, tuple[str, bool]] = {}

    def simple_name(self, obj: Any) -> str:
        """The simple name of a JVM object's class (``LongType`` for ``LongType$``)."""
        return str(self._name(obj)).rsplit(".", 1)[-1].rstrip("$").rsplit("$", 1)[-1]

    def _kind(self, obj: Any, name: str) -> tuple[str, bool]:
        """(kind, user-defined) of a class: plan, expression, seq, iterable, product or leaf."""
        if name not in self._kinds:
            found = [kind for kind, type_ in self._types if type_.isAssignableFrom(obj.getClass())]
            kind = next((k for k in ("plan", "expression", "seq", "iterable", "product") if k in found), "leaf")
            self._kinds[name] = (kind, "udf" in found)
        return self._kinds[name]

    def nodes(self, root: Any, stop: Callable[[Node], bool] = lambda _node: False) -> Iterator[Node]:
        """Every plan node and expression reachable from ``root`` (depth first); ``stop`` prunes a subtree.

        User-defined expressions are reported with kind ``"udf"``.
        """
        todo = [root]
        while todo:
            obj = todo.pop()
            if not isinstance(obj, JavaObject):
                continue  # strings, numbers, booleans
            full = self._name(obj)
            kind, udf = self._kind(obj, full)
            if kind == "leaf" or (kind == "product" and full.endswith("$")):
                continue  # types, metadata, ids; case objects (Inner$, Ascending$) have no fields
            if kind in ("plan", "expression"):
                node = Node("udf" if udf else kind, full.rsplit(".", 1)[-1].rsplit("$", 1)[-1], full, obj)
                yield node
                if stop(node) or node.name in ("Literal", "AttributeReference", "UnresolvedAttribute"):
                    continue
            if kind == "seq":
                todo.extend(obj.apply(i) for i in reversed(range(obj.length())))
            elif kind == "iterable":
                iterator = obj.iterator()
                while iterator.hasNext():
                    todo.append(iterator.next())
            else:
                todo.extend(obj.productElement(i) for i in reversed(range(obj.productArity())))


def _function_name(node: Node) -> str:
    return str(node.obj.nameParts().last()).lower()


def _integer_literal(walker: PlanWalker, expr: Any) -> int | None:
    """The value of an integer literal (``-5`` included), None for anything else."""
    nodes = list(walker.nodes(expr))
    names = [n.name for n in nodes]
    if names not in (["Literal"], ["UnaryMinus", "Literal"]):
        return None
    value = nodes[-1].obj.value()
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return -value if names[0] == "UnaryMinus" else value


def _check_size(walker: PlanWalker, node: Node, name: str) -> None:
    """A value-building function's sizes are integer literals within :data:`MAX_BUILT_SIZE`, not nested."""
    args = [node.obj.arguments().apply(i) for i in range(node.obj.arguments().length())]
    limit = f"{name}() needs integer literals here, at most {MAX_BUILT_SIZE:,} (the query's value-size limit)"
    for arg in args:
        if any(n.kind == "expression" and n.name == "UnresolvedFunction" and _function_name(n) in SIZE_ARGUMENTS
               for n in walker.nodes(arg)):
            raise QueryError(f"{name}() may not take the result of another value-building function "
                          "(the query's value-size limit)", "VALUE_TOO_LARGE")
    if name == "sequence":
        bounds = [_integer_literal(walker, a) for a in args]
        if len(bounds) < 2 or any(b is None for b in bounds):
            raise QueryError(limit, "VALUE_TOO_LARGE")
        start, stop, step = bounds[0], bounds[1], bounds[2] if len(bounds) > 2 else 1
        assert start is not None and stop is not None and step is not None
        if step == 0 or abs(stop - start) // abs(step) + 1 > MAX_BUILT_SIZE:
            raise QueryError(limit, "VALUE_TOO_LARGE")
        return
    for position in SIZE_ARGUMENTS[name]:
        size = _integer_literal(walker, args[position]) if position < len(args) else 0
        if size is None or size > MAX_BUILT_SIZE:
            raise QueryError(limit, "VALUE_TOO_LARGE")


def check_parsed(walker: PlanWalker, plan: Any, functions: Collection[str]) -> list[Node]:
    """Refuse a parsed plan with anything but query operators and allowed functions; its nodes.

    ``functions``: the names of the built-in functions (lower case) before any were dropped.
    """
    nodes = list(walker.nodes(plan))
    for node in nodes:
        if node.kind == "plan" and node.name not in PARSED_OPERATORS:
            raise QueryError(f"only read-only queries (SELECT, WITH, VALUES) are allowed; found {node.name}",
                          "NOT_READ_ONLY")
        if node.name == "UnresolvedFunction":
            name = _function_name(node)
            if name == "raise_error" and _raises_max_bytes(walker, node):
                continue
            _check_function(name, functions)
            if name in SIZE_ARGUMENTS:
                _check_size(walker, node, name)
            elif name in ("format_string", "printf"):
                _check_format(walker, node, name)
        elif node.name == "UnresolvedGenerator":  # LATERAL VIEW f(...)
            _check_function(str(node.obj.name().funcName()).lower(), functions)
        elif node.name == "UnresolvedTableValuedFunction":
            name = str(node.obj.name().last()).lower()
            if name not in TABLE_FUNCTIONS:
                raise QueryError(f"table function {name}() is not allowed in queries", "FUNCTION_NOT_ALLOWED")
    return nodes


def _raises_max_bytes(walker: PlanWalker, node: Node) -> bool:
    """Whether ``node`` is ``raise_error(concat('Unable to serialize [', ...))``, the one a query may call.

    It is the error of a collection past Druid's ``maxBytes`` (:mod:`overlord.query.collect_max_bytes`).
    """
    args = node.obj.arguments()
    message = args.apply(0) if args.length() == 1 else None
    if message is None or walker.simple_name(message) != "UnresolvedFunction" or \
            str(message.nameParts().last()).lower() != "concat" or message.arguments().length() == 0:
        return False
    first = message.arguments().apply(0)
    return walker.simple_name(first) == "Literal" and str(first.value()).startswith(MAX_BYTES_MESSAGE)


def _check_format(walker: PlanWalker, node: Node, name: str) -> None:
    """``format_string``'s format is a string literal whose widths and precisions are within the limit."""
    args = node.obj.arguments()
    nodes = list(walker.nodes(args.apply(0))) if args.length() else []
    value = nodes[0].obj.value() if [n.name for n in nodes] == ["Literal"] else None
    if value is None or not isinstance(str(value), str) or any(
            width > MAX_BUILT_SIZE for width in format_widths(str(value))):
        raise QueryError(f"{name}() needs a string literal format whose widths and precisions are at most "
                         f"{MAX_BUILT_SIZE:,} (the query's value-size limit)", "VALUE_TOO_LARGE")


def _check_function(name: str, functions: Collection[str]) -> None:
    """Refuse a function that is not allowed, naming it as Druid does; or one Spark lacks, naming Druid's if it is."""
    if name in DENIED_FUNCTIONS or (name in functions and size_class(name) is None):
        raise QueryError(f"function {SPARK_NAMES.get(name, name)}() is not allowed in queries", "FUNCTION_NOT_ALLOWED")
    if name.upper() in DRUID_SQL_FUNCTIONS and name not in functions:
        raise QueryError(f"{name.upper()} is a Druid function this overlord does not support", "UNSUPPORTED_DRUID_SQL")
    if name not in functions:
        raise QueryError(f"function {name}() does not exist (neither a Spark SQL function nor a Druid function "
                         "this overlord translates)", "UNRESOLVED_ROUTINE")


def check_analyzed(walker: PlanWalker, plan: Any, views: Collection[str],
                   value_sizes: Mapping[str, Mapping[str, int]] | None = None,
                   row_counts: Mapping[str, int] | None = None) -> None:
    """Refuse an analyzed plan with an operator, relation or expression outside the allow-lists.

    ``views``: the names (lower case) of the temporary views the overlord made over datasources;
    their insides are the overlord's and are not walked. ``value_sizes``: by view, bounds of its
    columns' values known from the data (lower-case names, :mod:`overlord.query.value_sizes`); a
    column's bound is the smaller of its own and :data:`~overlord.query.function_bounds.COLUMN_SIZE`.
    ``row_counts``: by view, how many rows it holds (a view not named may hold any number).
    """
    def ours(node: Node) -> bool:
        return node.name == "View" and str(node.obj.desc().identifier().table()).lower() in views

    bounds = _Bounds(walker, RowBounds(walker, {name: n for name, n in (row_counts or {}).items() if name in views}))
    for node in walker.nodes(plan, stop=ours):
        if ours(node) and (sizes := (value_sizes or {}).get(str(node.obj.desc().identifier().table()).lower())):
            bounds.measured(node.obj.output(), sizes)
        if node.kind == "plan":
            if node.name not in ANALYZED_OPERATORS or (node.name == "View" and not ours(node)):
                raise QueryError(f"only read-only queries over datasources are allowed; found {node.name}",
                              "NOT_READ_ONLY")
            bounds.collect(node)
        elif node.kind == "udf" or node.name in DENIED_EXPRESSIONS or not node.full_name.startswith(
                _EXPRESSIONS_PACKAGE):
            raise QueryError(f"expression {node.name} is not allowed in queries", "FUNCTION_NOT_ALLOWED")
        elif node.full_name.startswith(_AGGREGATES_PACKAGE):
            _check_aggregate(node)
        elif node.name == "Alias":
            bounds.define(node.obj, node.obj.child())
    bounds.link()
    bounds.check(plan, ours)


_SUBQUERIES = frozenset({"ScalarSubquery", "ListQuery", "Exists", "LateralSubquery"})
_FIXED_TYPES = frozenset({
    "ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType", "BooleanType",
    "DateType", "TimestampType", "TimestampNTZType", "NullType", "CalendarIntervalType", "DayTimeIntervalType",
    "YearMonthIntervalType", "TimeType"})
"""Data types of fixed width: their values (and texts) are at most :data:`FIXED_SIZE`."""


class _Bounds:
    """Upper bounds of the sizes of an analyzed plan's values (see :mod:`overlord.query.function_bounds`).

    :meth:`collect` learns from each plan node what defines its attributes (aliases, CTE references,
    unions, generators, grouping sets); :meth:`check` then bounds every expression of every node
    and raises :class:`QueryError` at the first whose bound is past :data:`MAX_VALUE_SIZE`.
    """

    def __init__(self, walker: PlanWalker, rows: RowBounds) -> None:
        self._walker = walker
        self._rows = rows
        self._collecting: list[tuple[list[int], Any]] = []  # (aggregates' result ids, the plan they read)
        self._read: dict[int, int] = {}  # a collecting aggregate's result id -> the rows it may read
        self._defs: dict[int, list[Any]] = {}  # expression id -> expressions its value is one of
        self._extra: dict[int, list[Any]] = {}  # a union's attribute -> its other inputs' attributes
        self._ctes: dict[int, Any] = {}  # CTE id -> its definition's output
        self._refs: list[tuple[int, Any]] = []  # (CTE id, a reference's output)
        self._attributes: dict[int, int] = {}
        self._active: set[int] = set()
        self._lambdas: dict[int, int] = {}
        self._measured: dict[int, int] = {}  # a datasource column's attribute -> its values' bound from the data
        self._ours: Callable[[Node], bool] = lambda _node: False

    def define(self, attribute: Any, source: Any, extra: bool = False) -> None:
        key = attribute.exprId().id()
        if self._walker.simple_name(source) == "AttributeReference" and source.exprId().id() == key:
            return
        (self._extra if extra else self._defs).setdefault(key, []).append(source)

    def measured(self, output: Any, sizes: Mapping[str, int]) -> None:
        """A datasource view's columns (its output) hold values within ``sizes`` (by lower-case name)."""
        for i in range(output.length()):
            attribute = output.apply(i)
            if (size := sizes.get(str(attribute.name()).lower())) is not None:
                self._measured[attribute.exprId().id()] = min(size, COLUMN_SIZE)

    def collect(self, node: Node) -> None:
        obj = node.obj
        if node.name in ("Aggregate", "Window"):
            expressions = obj.expressions()
            ids = [found for i in range(expressions.length()) for found in self._collectors(expressions.apply(i))]
            if ids:
                self._collecting.append((ids, obj.child()))
        if node.name == "CTERelationDef":
            self._rows.define(obj.id(), obj.child())
            self._ctes[obj.id()] = obj.child().output()
        elif node.name == "CTERelationRef":
            self._refs.append((obj.cteId(), obj.output()))
        elif node.name == "Union":
            output = obj.output()
            children = obj.children()
            for k in range(1, children.length()):
                theirs = children.apply(k).output()
                for i in range(min(output.length(), theirs.length())):
                    self.define(output.apply(i), theirs.apply(i), extra=True)
        elif node.name == "Expand":
            output, projections = obj.output(), obj.projections()
            for k in range(projections.length()):
                projection = projections.apply(k)
                for i in range(min(output.length(), projection.length())):
                    self.define(output.apply(i), projection.apply(i))
        elif node.name == "Generate":
            output = obj.generatorOutput()
            for i in range(output.length()):
                self.define(output.apply(i), obj.generator())

    def _collectors(self, expr: Any) -> list[int]:
        """The result ids of the collecting aggregates in ``expr`` (not in its subqueries)."""
        if self._walker.simple_name(expr) == "AggregateExpression":
            if self._walker.simple_name(expr.aggregateFunction()) in COLLECTING_CLASSES:
                return [expr.resultId().id()]
        children = expr.children()
        return [found for i in range(children.length()) for found in self._collectors(children.apply(i))]

    def link(self) -> None:
        for cte, output in self._refs:
            if (defined := self._ctes.get(cte)) is not None:
                for i in range(output.length()):
                    self.define(output.apply(i), defined.apply(i))
        for ids, child in self._collecting:
            rows = self._rows.count(child, self.bound)
            self._read.update((key, max(rows, self._read.get(key, 0))) for key in ids)

    def check(self, plan: Any, ours: Callable[[Node], bool]) -> None:
        self._ours = ours
        for node in self._walker.nodes(plan, stop=lambda n: n.kind != "plan" or ours(n)):
            if node.kind != "plan":
                self.bound(node.obj)

    def _default(self, expr: Any) -> int:
        if self._fixed(expr):
            return FIXED_SIZE
        try:
            return self._measured.get(expr.exprId().id(), COLUMN_SIZE)
        except Exception:  # noqa: BLE001 - an expression without an id is no datasource column
            return COLUMN_SIZE

    def _fixed(self, expr: Any) -> bool:
        try:
            return self._walker.simple_name(expr.dataType()) in _FIXED_TYPES
        except Exception:  # noqa: BLE001 - an expression without a data type is not a fixed-width one
            return False

    def _attribute(self, expr: Any) -> int:
        key = expr.exprId().id()
        if key in self._attributes:
            return self._attributes[key]
        if key in self._active:
            return self._default(expr)
        self._active.add(key)
        try:
            defs = self._defs.get(key)
            value = max(self.bound(d) for d in defs) if defs else self._default(expr)
            value = max([value] + [self.bound(e) for e in self._extra.get(key, [])])
        finally:
            self._active.discard(key)
        self._attributes[key] = value
        return value

    def bound(self, expr: Any) -> int:
        """The bound of ``expr``'s values; :class:`QueryError` if it is past :data:`MAX_VALUE_SIZE`."""
        name = self._walker.simple_name(expr)
        if name == "AttributeReference":
            return self._attribute(expr)
        if name == "OuterReference":
            return self.bound(expr.e())
        if name == "NamedLambdaVariable":
            return self._lambdas.get(expr.exprId().id(), self._default(expr))
        if name == "Literal":
            return FIXED_SIZE if self._fixed(expr) else len(str(expr.toString()))
        if name in _SUBQUERIES:
            self.check(expr.plan(), self._ours)
            output = expr.plan().output()
            return self._limit(expr, FIXED_SIZE if self._fixed(expr) or not output.length()
                               else self.bound(output.apply(0)))
        if name in LAMBDA_CLASSES or name in FILTER_CLASSES:
            return self._limit(expr, self._higher_order(expr, name))
        if name == "AggregateExpression" and self._walker.simple_name(expr.aggregateFunction()) in COLLECTING_CLASSES:
            for i in range(1, expr.children().length()):  # a FILTER's condition
                self.bound(expr.children().apply(i))
            element = self.bound(expr.aggregateFunction().children().apply(0))
            rows = self._read.get(expr.resultId().id(), UNBOUNDED)
            return self._limit(expr.aggregateFunction(), rows * (element + 8))
        children = expr.children()
        kids = [children.apply(i) for i in range(children.length())]
        bounds = [self.bound(kid) for kid in kids]
        value = sized(name, kids, [self._walker.simple_name(kid) for kid in kids], bounds)
        if value is None:
            if name == "Cast":
                value = bounds[0] * (1 if self._fixed(kids[0]) or self._walker.simple_name(
                    kids[0].dataType()) in ("StringType", "BinaryType") else 4) + FIXED_SIZE
            elif name in LARGEST_INPUT:
                value = max(bounds, default=FIXED_SIZE)
            elif name in MULTIPLIERS:
                value = MULTIPLIERS[name] * sum(bounds) + FIXED_SIZE
            elif name in ("AggregateExpression", "WindowExpression"):
                value = bounds[0]
            else:
                value = sum(bounds) + 8 * len(bounds)
        if self._fixed(expr):
            return FIXED_SIZE
        return self._limit(expr, value)

    def _higher_order(self, expr: Any, name: str) -> int:
        """A lambda's result per element: ``count * (f(0) + 8) + f(E)`` over inputs of total bound ``E``."""
        arguments, functions = expr.arguments(), expr.functions()
        total = sum(self.bound(arguments.apply(i)) for i in range(arguments.length()))
        value = 0
        for i in range(functions.length()):
            function = functions.apply(i)
            variables = function.arguments()
            keys = [variables.apply(j).exprId().id() for j in range(variables.length())]
            results = []
            for size in (0, total):
                self._lambdas.update((key, size) for key in keys)
                results.append(self.bound(function.function()))
            value += (total // 8 + 1) * (results[0] + 8) + results[1]
        return total if name in FILTER_CLASSES else value

    def _limit(self, expr: Any, value: int) -> int:
        if value > MAX_VALUE_SIZE:
            try:
                what = f"{SPARK_NAMES.get(str(expr.prettyName()), expr.prettyName())}()"
            except Exception:  # noqa: BLE001 - not every expression has a pretty name
                what = self._walker.simple_name(expr)
            raise QueryError(f"{what} may build a value of up to {value:,} characters, more than the query limit "
                             f"of {MAX_VALUE_SIZE:,} (a datasource column counts as its files' largest column "
                             f"chunk, at most {COLUMN_SIZE:,}): build smaller values", "VALUE_TOO_LARGE")
        return value


def _check_aggregate(node: Node) -> None:
    """Refuse an aggregate that would read stored sketches, first/last pairs or multi-value lists as values.

    Counting or comparing their bytes, pairs or whole lists gives an answer that looks like
    Druid's and is not. Only the sketch readers may take sketches; only a plain ``COUNT``, lists.
    """
    if node.name == "AggregateExpression":  # COUNT(DISTINCT list) would count distinct lists
        if node.obj.isDistinct() and "array" in _input_types(node.obj.aggregateFunction()):
            raise QueryError("COUNT(DISTINCT ...) over a multi-value column counts whole rows' lists, not values: "
                             "GROUP BY the column (one group per value) or use MV_ functions", "UNSUPPORTED_DRUID_SQL")
        return
    kinds = _input_types(node.obj)
    if node.name not in SKETCH_READERS and kinds & {"binary", "pair"}:
        raise QueryError(f"{node.name} over stored sketches or first/last pairs: use APPROX_COUNT_DISTINCT_DS_"
                         "THETA/HLL, APPROX_COUNT_DISTINCT, APPROX_QUANTILE_DS, EARLIEST or LATEST directly on the "
                         "column (not through an alias, a subquery or an expression)", "UNSUPPORTED_DRUID_SQL")
    if node.name != "Count" and "array" in kinds:
        raise QueryError(f"{node.name} over a multi-value column would take whole rows' lists, not values: GROUP BY "
                         "the column (one group per value) or use MV_ functions", "UNSUPPORTED_DRUID_SQL")


def _input_types(expression: Any) -> set[str]:
    """The type names of an expression's inputs (``pair`` for a first/last pair, a ``struct<lhs, rhs[, offset]>``)."""
    names = set()
    children = expression.children()
    for i in range(children.length()):
        kind = children.apply(i).dataType()
        name = str(kind.typeName())
        names.add("pair" if name == "struct" and list(kind.fieldNames())[:2] == ["lhs", "rhs"] else name)
    return names


def relations(nodes: list[Node]) -> list[str]:
    """Single-part table names a parsed plan refers to (datasources, or CTE names), once per reference."""
    names = []
    for node in nodes:
        if node.name == "UnresolvedRelation":
            parts = node.obj.multipartIdentifier()
            if parts.length() == 1:
                names.append(str(parts.apply(0)))
    return names
