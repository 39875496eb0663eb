"""How many rows an analyzed plan's nodes may produce: the bound of a collecting aggregate's elements.

See :mod:`overlord.query.function_bounds` for the rules and :mod:`overlord.query.sandbox` for their use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from overlord.query.sandbox import PlanWalker

__all__ = ["UNBOUNDED", "RowBounds"]

UNBOUNDED = 2 ** 62
"""The row count of a source this module cannot count (past any value limit times any element)."""
_SAME_ROWS = frozenset({
    "Filter", "Project", "Sort", "SubqueryAlias", "View", "Window", "Distinct", "Deduplicate", "GlobalLimit",
    "LocalLimit", "Offset", "Sample", "Repartition", "RepartitionByExpression", "RebalancePartitions",
    "ResolvedHint", "CTERelationDef", "Intersect", "Except"})
"""Plan nodes with at most as many rows as their first child."""


class RowBounds:
    """Upper bounds of how many rows an analyzed plan's nodes produce (see :mod:`overlord.query.function_bounds`)."""

    def __init__(self, walker: PlanWalker, views: Mapping[str, int]) -> None:
        self._walker = walker
        self._views = views
        self._ctes: dict[int, Any] = {}
        self._active: set[int] = set()

    def define(self, cte: int, plan: Any) -> None:
        """The CTE ``cte`` is ``plan``."""
        self._ctes[cte] = plan

    def count(self, plan: Any, bound: Callable[[Any], int]) -> int:
        """At most how many rows ``plan`` produces; :data:`UNBOUNDED` when it cannot tell.

        ``bound``: the size bound of an expression (a generator's array holds at most one element per 8).
        """
        return min(self._count(plan, bound), UNBOUNDED)

    def _count(self, plan: Any, bound: Callable[[Any], int]) -> int:
        name = self._walker.simple_name(plan)
        children = [plan.children().apply(i) for i in range(plan.children().length())]
        if name == "View" and (table := str(plan.desc().identifier().table()).lower()) in self._views:
            return int(self._views[table])
        if name == "OneRowRelation":
            return 1
        if name == "LocalRelation":
            return int(plan.data().length())
        if name == "Aggregate" and plan.groupingExpressions().length() == 0:
            return 1
        if name == "CTERelationRef":
            cte = plan.cteId()
            if cte not in self._ctes or cte in self._active:
                return UNBOUNDED
            self._active.add(cte)
            try:
                return self.count(self._ctes[cte], bound)
            finally:
                self._active.discard(cte)
        if name in ("Join", "LateralJoin") and len(children) == 2:
            return (self.count(children[0], bound) + 1) * (self.count(children[1], bound) + 1)
        if name == "Union":
            return sum(self.count(child, bound) for child in children)
        if name == "Expand":
            return self.count(children[0], bound) * int(plan.projections().length())
        if name == "Generate":
            return self.count(children[0], bound) * (bound(plan.generator()) // 8 + 1)
        if name == "WithCTE":
            return self.count(plan.plan(), bound)
        if name in _SAME_ROWS or name == "Aggregate":
            return self.count(children[0], bound) if children else UNBOUNDED
        return UNBOUNDED  # a range, a source not counted
