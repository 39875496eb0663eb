"""The read-only check: a query's parsed plan may hold only query operators and expressions.

* the text must parse (Spark's own parser) as one statement whose plan consists only of query
  operators (an allow-list: no commands, inserts, ``EXECUTE IMMEDIATE``, ``TRANSFORM ... USING``);
* ``reflect``, ``java_method`` and ``try_reflect`` (calls into the JVM) are rejected (the engine
  also drops them from its session's function registry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from overlord.query.errors import QueryError

__all__ = ["JVM_FUNCTIONS", "check_read_only", "plan_nodes", "relations"]

JVM_FUNCTIONS = ("reflect", "java_method", "try_reflect")
_QUERY_OPERATORS = frozenset({
    "Aggregate", "Distinct", "Except", "Filter", "Generate", "GlobalLimit", "Intersect", "Join", "LateralJoin",
    "LocalLimit", "LocalRelation", "Offset", "OneRowRelation", "Pivot", "Project", "RepartitionByExpression",
    "Sample", "Sort", "SubqueryAlias", "Union", "Unpivot", "UnresolvedHaving", "UnresolvedHint",
    "UnresolvedInlineTable", "UnresolvedRelation", "UnresolvedSubqueryColumnAliases",
    "UnresolvedTableValuedFunction", "UnresolvedTVFAliases", "UnresolvedWith", "WithWindowDefinition",
})
"""Logical plan nodes Spark's parser produces for read-only queries; every other plan node is refused."""


def plan_nodes(tree: Any) -> list[dict[str, Any]]:
    """Every serialised tree node (plans and expressions, including subqueries and CTEs)."""
    if isinstance(tree, list):
        return [node for item in tree for node in plan_nodes(item)]
    if isinstance(tree, dict):
        return ([tree] if "class" in tree else []) + [node for value in tree.values() for node in plan_nodes(value)]
    return []


def check_read_only(nodes: list[dict[str, Any]], is_expression: Callable[[str], bool]) -> None:
    """Refuse any plan node outside the allow-list and calls into the JVM (:class:`QueryError`)."""
    for node in nodes:
        full = str(node["class"])
        name = full.rsplit(".", 1)[-1]
        if name == "UnresolvedFunction":
            called = str(node.get("nameParts", "")).strip("[]").rsplit(",", 1)[-1].strip().lower()
            if called in JVM_FUNCTIONS:
                raise QueryError(f"function {called}() is not allowed: it calls into the JVM", "FUNCTION_NOT_ALLOWED")
        elif name not in _QUERY_OPERATORS and not is_expression(full):
            raise QueryError(f"only read-only queries (SELECT, WITH, VALUES) are allowed; found {name}",
                             "NOT_READ_ONLY")


def relations(nodes: list[dict[str, Any]]) -> set[str]:
    """Single-part table names the query refers to (datasources, or CTE names)."""
    names = set()
    for node in nodes:
        if str(node["class"]).endswith(".UnresolvedRelation"):
            parts = str(node.get("multipartIdentifier", "")).strip("[]").split(", ")
            if len(parts) == 1 and parts[0]:
                names.add(parts[0])
    return names
