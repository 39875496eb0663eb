"""Druid's sketch objects in SQL: ``DS_HLL`` and ``DS_THETA`` built, combined and estimated with Spark's sketches.

``HLL_SKETCH_ESTIMATE(DS_HLL(x))``, ``THETA_SKETCH_ESTIMATE(THETA_SKETCH_INTERSECT(DS_THETA(a),
DS_THETA(b)))`` and the like are Spark's ``hll_sketch_agg``/``theta_sketch_agg`` and their
estimates and set operations (Apache DataSketches, as in Druid). As in DataSketches, null and the
empty string are not counted; Spark's HLL takes numbers as their text. A sketch is only ever read
through an estimate in the same expression: the sketch's bytes are not Druid's (Spark hashes
values as Spark types them), so a query that returns a sketch, or names one from a subquery, is
refused rather than answered with other bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from overlord.query.query_errors import QueryError

__all__ = ["SKETCH_OBJECT_FUNCTIONS", "sketch_argument"]

_HLL_TYPES = ("HLL_4", "HLL_6", "HLL_8")
_ESTIMATE = {"DS_HLL": "HLL_SKETCH_ESTIMATE", "DS_THETA": "THETA_SKETCH_ESTIMATE",
             "THETA_SKETCH_UNION": "THETA_SKETCH_ESTIMATE", "THETA_SKETCH_INTERSECT": "THETA_SKETCH_ESTIMATE",
             "THETA_SKETCH_NOT": "THETA_SKETCH_ESTIMATE"}
_SET_OPERATIONS = {"THETA_SKETCH_UNION": "theta_union", "THETA_SKETCH_INTERSECT": "theta_intersection",
                   "THETA_SKETCH_NOT": "theta_difference"}


def _refuse(message: str) -> QueryError:
    return QueryError(message, "UNSUPPORTED_DRUID_SQL")


def _name(node: exp.Expr | None) -> str:
    return str(node.this).upper() if isinstance(node, exp.Anonymous) else ""


def _estimated(node: exp.Expr, function: str) -> None:
    """Refuse ``node`` (a sketch) unless an estimate reads it, through FILTERs and set operations only."""
    parent = node.parent
    while parent is not None and (isinstance(parent, exp.Filter) or _name(parent) in _SET_OPERATIONS):
        parent = parent.parent
    if _name(parent) != _ESTIMATE[function]:
        raise _refuse(f"{function}: a sketch is only read through {_ESTIMATE[function]}(...) in the same "
                      "expression here; returning the sketch itself is not supported")


def _lg(args: list[exp.Expr], index: int, function: str, what: str, default: int, low: int, high: int,
        power_of_two: bool) -> int:
    """An integer literal argument (its base-2 logarithm with ``power_of_two``), ``default`` when absent."""
    if index >= len(args):
        return default
    value = args[index]
    number = int(value.this) if isinstance(value, exp.Literal) and value.is_int else None
    if number is None or not low <= number <= high or (power_of_two and number & (number - 1)):
        kind = "a power of 2" if power_of_two else "an integer"
        raise _refuse(f"{function}: the {what} must be {kind} literal from {low} to {high}")
    return number.bit_length() - 1 if power_of_two else number


def sketch_argument(value: exp.Expr) -> exp.Expr:
    """``value`` as a sketch counts it: null for null and ''; its type kept (the sandbox refuses stored sketches)."""
    empty = exp.EQ(this=exp.Cast(this=value.copy(), to=exp.DataType.build("STRING")), expression=exp.Literal.string(""))
    return exp.If(this=empty, true=exp.Null(), false=value.copy())


def _ds_hll(node: exp.Anonymous, args: list[exp.Expr]) -> exp.Expr:
    _estimated(node, "DS_HLL")
    if not 1 <= len(args) <= 3:
        raise _refuse(f"DS_HLL takes 1 to 3 arguments, got {len(args)}")
    lg_k = _lg(args, 1, "DS_HLL", "lgK", 12, 4, 21, False)
    kind = args[2].this if len(args) > 2 and isinstance(args[2], exp.Literal) else "HLL_4"
    if kind not in _HLL_TYPES:
        raise _refuse("DS_HLL: tgtHllType must be HLL_4, HLL_6 or HLL_8")
    counted = exp.Anonymous(this="concat", expressions=[sketch_argument(args[0])])  # a number as its text
    return exp.Anonymous(this="hll_sketch_agg", expressions=[counted, exp.Literal.number(lg_k)])


def _ds_theta(node: exp.Anonymous, args: list[exp.Expr]) -> exp.Expr:
    _estimated(node, "DS_THETA")
    if not 1 <= len(args) <= 2:
        raise _refuse(f"DS_THETA takes 1 or 2 arguments, got {len(args)}")
    lg_size = _lg(args, 1, "DS_THETA", "size", 14, 16, 2**20, True)
    return exp.Anonymous(this="theta_sketch_agg", expressions=[sketch_argument(args[0]),
                                                               exp.Literal.number(lg_size)])


def _set_operation(function: str) -> Callable[[exp.Anonymous, list[exp.Expr]], exp.Expr]:
    """THETA_SKETCH_UNION/INTERSECT/NOT([size, ] a, b, ...): pairwise, left to right."""
    def translate_call(node: exp.Anonymous, args: list[exp.Expr]) -> exp.Expr:
        _estimated(node, function)
        if args and isinstance(args[0], exp.Literal) and args[0].is_int:
            _lg(args, 0, function, "size", 16384, 16, 2**20, True)  # Spark's result keeps its inputs' size
            args = args[1:]
        if len(args) < 2:
            raise _refuse(f"{function} takes at least 2 sketches, got {len(args)}")
        result = args[0].copy()
        for other in args[1:]:
            result = exp.Anonymous(this=_SET_OPERATIONS[function], expressions=[result, other.copy()])
        return result
    return translate_call


def _estimate(function: str, spark_name: str, high: int) -> Callable[[exp.Anonymous, list[exp.Expr]], exp.Expr]:
    def translate_call(node: exp.Anonymous, args: list[exp.Expr]) -> exp.Expr:
        if not 1 <= len(args) <= high:
            raise _refuse(f"{function} takes 1 to {high} arguments, got {len(args)}")
        return exp.Anonymous(this=spark_name, expressions=[args[0].copy()])  # HLL's is a whole number already
    return translate_call


SKETCH_OBJECT_FUNCTIONS: dict[str, Callable[[exp.Anonymous, list[exp.Expr]], exp.Expr]] = {
    "DS_HLL": _ds_hll, "DS_THETA": _ds_theta,
    "HLL_SKETCH_ESTIMATE": _estimate("HLL_SKETCH_ESTIMATE", "hll_sketch_estimate", 2),
    "THETA_SKETCH_ESTIMATE": _estimate("THETA_SKETCH_ESTIMATE", "theta_sketch_estimate", 1),
    **{name: _set_operation(name) for name in _SET_OPERATIONS},
}
"""Druid's sketch-object functions, by name: (the call, its arguments) -> Spark SQL."""
