"""The SQL sandbox: a query runs only if every node of its plan is on an allow-list.

The check walks Spark's own plan objects in the JVM (through py4j), never a rendering of them:
every field of every plan node and expression, into sequences, options, maps and tuples, so
subqueries, CTEs, window definitions (a map, which a plan's JSON renders as ``null``), lateral
views and hints are all seen. It runs twice:

1. on the **parsed** plan, before Spark analyses or runs anything: operators must be query
   operators (no command, ``SET``, insert, ``TRANSFORM ... USING``, ``EXECUTE IMMEDIATE``),
   functions and table functions built-ins minus the denied ones, and functions that build
   large values (``repeat``, ``sequence``, ...) bounded by integer literals;
2. on the **analyzed** plan, before anything executes: operators on the analyzed allow-list,
   relations only the overlord's own datasource views, and expressions Catalyst built-ins
   (no user-defined function, no call into the JVM however the function was named).

Class names are matched by their simple names, so the check does not depend on one Spark
version's plan serialisation; a node an allow-list does not know is refused (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from py4j.java_gateway import JavaObject

from overlord.query.errors import QueryError

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

MAX_BUILT_SIZE = 10_000
"""The largest count or length a value-building function may be given (characters or elements)."""

SIZE_ARGUMENTS = {"repeat": (1,), "space": (0,), "lpad": (1,), "rpad": (1,), "array_repeat": (1,),
                  "randstr": (0,), "sequence": ()}
"""Value-building functions and the positions of their size arguments (``sequence``: its span)."""

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
"""Aggregates that may read stored sketches (binary) or first/last pairs (``struct<lhs, rhs>``); any other
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
            _check_function(name, functions)
            if name in SIZE_ARGUMENTS:
                _check_size(walker, node, name)
        elif node.name == "UnresolvedGenerator":  # LATERAL VIEW f(...)
            _check_function(str(node.obj.name().funcName()).lower(), functions)
        elif node.name == "UnresolvedTableValuedFunction":
            name = str(node.obj.name().last()).lower()
            if name not in TABLE_FUNCTIONS:
                raise QueryError(f"table function {name}() is not allowed in queries", "FUNCTION_NOT_ALLOWED")
    return nodes


def _check_function(name: str, functions: Collection[str]) -> None:
    if name in DENIED_FUNCTIONS:
        raise QueryError(f"function {name}() is not allowed in queries", "FUNCTION_NOT_ALLOWED")
    if name not in functions:
        raise QueryError(f"function {name}() does not exist (neither a Spark SQL function nor a Druid function "
                         "this overlord translates)", "UNRESOLVED_ROUTINE")


def check_analyzed(walker: PlanWalker, plan: Any, views: Collection[str]) -> None:
    """Refuse an analyzed plan with an operator, relation or expression outside the allow-lists.

    ``views``: the names (lower case) of the temporary views the overlord made over datasources;
    their insides are the overlord's and are not walked.
    """
    def ours(node: Node) -> bool:
        return node.name == "View" and str(node.obj.desc().identifier().table()).lower() in views

    for node in walker.nodes(plan, stop=ours):
        if node.kind == "plan":
            if node.name not in ANALYZED_OPERATORS or (node.name == "View" and not ours(node)):
                raise QueryError(f"only read-only queries over datasources are allowed; found {node.name}",
                              "NOT_READ_ONLY")
        elif node.kind == "udf" or node.name in DENIED_EXPRESSIONS or not node.full_name.startswith(
                _EXPRESSIONS_PACKAGE):
            raise QueryError(f"expression {node.name} is not allowed in queries", "FUNCTION_NOT_ALLOWED")
        elif node.full_name.startswith(_AGGREGATES_PACKAGE):
            _check_aggregate(node)


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
    """The type names of an expression's inputs (``pair`` for a first/last pair, a ``struct<lhs, rhs>``)."""
    names = set()
    children = expression.children()
    for i in range(children.length()):
        kind = children.apply(i).dataType()
        name = str(kind.typeName())
        names.add("pair" if name == "struct" and list(kind.fieldNames()) == ["lhs", "rhs"] else name)
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
