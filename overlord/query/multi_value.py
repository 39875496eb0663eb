"""Druid's multi-value string dimensions in Spark SQL: a list column that behaves as Druid's does.

Segments store a multi-value dimension as a list of strings (one-element lists for single
values; a null row for ``[]``). :func:`rewrite_multi_value` rewrites a parsed Druid SQL query,
knowing which columns are multi-value, so that:

- ``GROUP BY tags`` groups by each value of a row (``LATERAL VIEW OUTER explode``), after the
  ``WHERE`` filtered whole rows; a null row groups as null. Druid calls this implicit unnesting;
- a comparison (``=``, ``<>``, ``<``, ``IN``, ``LIKE``, ...) of the column matches a row when
  any of its values matches; ``NOT`` matches when none does, and neither matches a null row;
- the column selected as it is gives the value of a one-value row and the JSON array text of
  a row of several (Druid's ``sqlStringifyArrays``);
- ``MV_CONTAINS``, ``MV_OVERLAP``, ``MV_LENGTH``, ``MV_OFFSET``, ``MV_ORDINAL``, ``MV_TO_STRING``,
  ``MV_TO_ARRAY``, ``MV_FILTER_ONLY``, ``MV_FILTER_NONE`` and ``STRING_TO_MV`` are Spark's array
  functions (over a single-valued column too, as a one-element list).

Other uses (an aggregate over the list, a function expecting a string) fail in Spark or are
refused by the sandbox, never answered differently.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from overlord.query.errors import QueryError

__all__ = ["MV_FUNCTIONS", "is_mv", "rewrite_multi_value"]

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.In, exp.Between)
_ELEMENT = "__v"


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _lambda(body: exp.Expr) -> exp.Expr:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(_ELEMENT)])


def _element() -> exp.Column:
    return exp.column(_ELEMENT)


def _null_or(column: exp.Expr, value: exp.Expr) -> exp.Expr:
    return exp.If(this=exp.Is(this=column.copy(), expression=exp.Null()), true=exp.Null(), false=value)


def _as_list(value: exp.Expr, names: frozenset[str]) -> exp.Expr:
    """``value`` as a list: a multi-value column or a list as it is; a single value as a one-element list."""
    if isinstance(value, exp.Column) and value.name.lower() not in names:
        return _null_or(value, exp.Array(expressions=[value.copy()]))
    return value.copy()


def _mv(function: Callable[..., exp.Expr], arity: int) -> Callable[[list[exp.Expr], frozenset[str]],
                                                                          exp.Expr]:
    def translate_call(args: list[exp.Expr], names: frozenset[str]) -> exp.Expr:
        if len(args) != arity:
            raise QueryError(f"a multi-value function takes {arity} argument{'s' if arity > 1 else ''} here, "
                             f"got {len(args)}", "UNSUPPORTED_DRUID_SQL")
        return function(_as_list(args[0], names), *(a.copy() for a in args[1:]))
    return translate_call


def _two(function: str, args: list[exp.Expr]) -> list[exp.Expr]:
    if len(args) != 2:
        raise QueryError(f"{function} takes 2 arguments, got {len(args)}", "UNSUPPORTED_DRUID_SQL")
    return args


def _slice(values: exp.Expr, start: exp.Expr, end: exp.Expr) -> exp.Expr:
    """Druid's ``[start, end)`` of 0-based offsets as Spark's ``slice(values, 1-based start, length)``."""
    return _call("slice", values, exp.Add(this=start.copy(), expression=exp.Literal.number(1)),
                 exp.Sub(this=end, expression=start))


def _position(values: exp.Expr, value: exp.Expr, base: int) -> exp.Expr:
    """The first offset (``base`` 1) or ordinal (``base`` 0) of ``value`` in ``values``; NULL when absent."""
    found = _call("array_position", values, value)
    return exp.Sub(this=_call("nullif", found, exp.Literal.number(0)), expression=exp.Literal.number(base))


def _contains(values: exp.Expr, wanted: exp.Expr) -> exp.Expr:
    """Whether the list ``values`` holds ``wanted``, or each element of ``wanted`` if it is an array."""
    if isinstance(wanted, exp.Array):  # every element of the array
        return _call("forall", wanted, _lambda(_call("array_contains", values, _element())))
    return _call("array_contains", values, wanted)


MV_FUNCTIONS: dict[str, Callable[[list[exp.Expr], frozenset[str]], exp.Expr]] = {
    "MV_CONTAINS": _mv(_contains, 2),
    "MV_OVERLAP": _mv(lambda a, b: _call("arrays_overlap", a, b), 2),
    "MV_LENGTH": _mv(lambda a: _null_or(a, _call("size", a.copy())), 1),
    "MV_OFFSET": _mv(lambda a, i: _call("try_element_at", a, exp.Add(this=i, expression=exp.Literal.number(1))), 2),
    "MV_ORDINAL": _mv(lambda a, i: _call("try_element_at", a, i), 2),
    "MV_TO_STRING": _mv(lambda a, sep: _call("array_join", a, sep), 2),
    "MV_TO_ARRAY": _mv(lambda a: a, 1),
    "MV_FILTER_ONLY": _mv(lambda a, keep: _nonempty(_call("filter", a, _lambda(
        _call("array_contains", keep, _element())))), 2),
    "MV_FILTER_NONE": _mv(lambda a, drop: _nonempty(_call("filter", a, _lambda(
        exp.Not(this=_call("array_contains", drop, _element()))))), 2),
    "STRING_TO_MV": lambda args, names: _call("split", *(a.copy() for a in args)),
    "MV_APPEND": _mv(lambda a, v: _call("concat", a, exp.Array(expressions=[v])), 2),
    "MV_SLICE": _mv(lambda a, start, end: _slice(a, start, end), 3),
    "MV_OFFSET_OF": _mv(lambda a, v: _position(a, v, 1), 2),
    "MV_ORDINAL_OF": _mv(lambda a, v: _position(a, v, 0), 2),
    "MV_PREPEND": lambda args, names: _call("concat", exp.Array(expressions=[_two("MV_PREPEND", args)[0].copy()]),
                                            _as_list(args[1], names)),
    "MV_CONCAT": lambda args, names: _call("concat", *(_as_list(a, names) for a in _two("MV_CONCAT", args))),
}
for _name in ("OFFSET", "ORDINAL", "OFFSET_OF", "ORDINAL_OF", "OVERLAP", "SLICE"):  # the same over arrays
    MV_FUNCTIONS[f"ARRAY_{_name}"] = MV_FUNCTIONS[f"MV_{_name}"]
"""Druid's multi-value and array functions, by name: (arguments, multi-value column names) -> Spark SQL."""


_MV_RESULTS = frozenset({"MV_APPEND", "MV_PREPEND", "MV_CONCAT", "MV_SLICE", "MV_FILTER_ONLY", "MV_FILTER_NONE",
                         "STRING_TO_MV"})
"""Functions whose value is multi-value: grouped by, they group by each value, as a column does."""


def is_mv(node: exp.Expr, names: frozenset[str]) -> bool:
    """Whether ``node`` is one of the multi-value columns ``names``."""
    return isinstance(node, exp.Column) and node.name.lower() in names


def _is_mv_result(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).upper() in _MV_RESULTS


def _nonempty(values: exp.Expr) -> exp.Expr:
    """An empty list as NULL: Druid's multi-value rows hold no empty list."""
    empty = exp.EQ(this=_call("size", values.copy()), expression=exp.Literal.number(0))
    return exp.If(this=empty, true=exp.Null(), false=values)


def _exploded(select: exp.Select, names: frozenset[str], counter: list[int]) -> None:
    """GROUP BY a multi-value column groups by its values: explode it, and read the value where grouped."""
    group = select.args.get("group")
    if group is None:
        return
    keys = []
    for key in group.expressions:
        if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(select.expressions):
            key = select.expressions[int(key.this) - 1].unalias()  # GROUP BY 1
        if is_mv(key, names) or _is_mv_result(key):
            keys.append(key)
    for key in keys:
        counter[0] += 1
        value = f"__mv{counter[0]}"
        select.append("laterals", exp.Lateral(
            this=exp.Explode(this=key.copy()), view=True, outer=True,
            alias=exp.TableAlias(this=exp.to_identifier(f"__mvt{counter[0]}"), columns=[exp.to_identifier(value)])))

        def grouped(node: exp.Expr, key: exp.Expr = key, value: str = value) -> exp.Expr:
            if not isinstance(key, exp.Column):
                return exp.column(value) if node == key else node
            if isinstance(node, exp.Column) and node.name.lower() == key.name.lower() and node.table in ("",
                                                                                                        key.table):
                return exp.column(value)
            return node
        for i, projection in enumerate(select.expressions):
            if is_mv(projection, names) and projection.name.lower() == key.name.lower():
                projection = exp.alias_(projection, projection.name, quoted=True)
            select.expressions[i] = projection.transform(grouped)
        for part in ("group", "having", "order"):
            if select.args.get(part) is not None:
                select.set(part, select.args[part].transform(grouped))


def _any_value(node: exp.Expr, names: frozenset[str]) -> exp.Expr:
    """A comparison of a multi-value column: true when one of a (non-null) row's values matches.

    ``<>`` is the negation of ``=`` (no value equal), as in Druid; a null row matches neither.
    """
    predicate = exp.EQ(this=node.this.copy(), expression=node.expression.copy()) if isinstance(
        node, exp.NEQ) else node.copy()
    target = next(c for c in predicate.find_all(exp.Column) if is_mv(c, names))
    column = target.copy()
    target.replace(_element())
    test: exp.Expr = exp.Coalesce(this=_call("exists", column, _lambda(predicate)), expressions=[exp.false()])
    if isinstance(node, exp.NEQ):
        test = exp.Not(this=test)
    return _null_or(column, test)


def _stringified(projection: exp.Expr) -> exp.Expr:
    """A multi-value column selected as it is: the value of a one-value row, else the JSON array text."""
    column = projection.copy()
    single = exp.EQ(this=_call("size", column.copy()), expression=exp.Literal.number(1))
    text = exp.If(this=single, true=_call("element_at", column.copy(), exp.Literal.number(1)),
                  false=_call("to_json", column.copy()))
    return exp.alias_(text, column.name, quoted=True)


def rewrite_multi_value(tree: exp.Expr, names: frozenset[str]) -> exp.Expr:
    """``tree`` (a Druid SQL query) with Druid's semantics for the multi-value columns ``names`` (lower case)."""
    counter = [0]
    for select in list(tree.find_all(exp.Select)):
        _exploded(select, names, counter)
    for node in list(tree.find_all(*_COMPARISONS)):
        operands = [c for c in node.find_all(exp.Column) if is_mv(c, names)]
        if len(operands) == 1 and not any(isinstance(a, exp.Select) for a in node.find_all(exp.Select)):
            node.replace(_any_value(node, names))
    if isinstance(tree, exp.Select):  # the result's columns (inner queries keep the lists)
        tree.set("expressions", [_stringified(p) if is_mv(p, names) else p for p in tree.expressions])
    return tree
