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
- ``MV_*`` functions (``MV_CONTAINS``, ``MV_OVERLAP``, ``MV_LENGTH``, ``MV_OFFSET``, ``MV_TO_STRING``,
  ``MV_FILTER_ONLY``, ``MV_FILTER_REGEX``, ``MV_APPEND``, ``MV_SLICE``, ...), their ``ARRAY_*`` twins
  and ``STRING_TO_MV`` are Spark's array functions (over a single-valued column too, as a one-element list);
- a scalar function of the column (``CONCAT``, ``||``, ``SUBSTRING``, ``UPPER``, ``LENGTH``,
  ``COALESCE``, ...) applies to each value (once to null for a null row): a multi-value result,
  grouped, compared and selected as the column is.

Other uses (an aggregate over the list, a function of two multi-value columns) fail in Spark or
are refused, never answered differently.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from overlord.query.query_errors import QueryError

__all__ = ["MV_FUNCTIONS", "has_mv_results", "is_mv", "rewrite_multi_value"]

_GROUPED = "__grouped"
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


def _druid_element(value: exp.Expr) -> exp.Expr:
    """A literal as Druid's array functions compare it: a decimal as a DOUBLE, a timestamp as its epoch millis.

    (Spark's DECIMAL literal meets no DOUBLE or FLOAT array; Druid's arrays hold ``__time`` as a long.)
    """
    if isinstance(value, exp.Array):
        return exp.Array(expressions=[_druid_element(e) for e in value.expressions])
    if isinstance(value, exp.Literal) and not value.is_string and not value.is_int:
        return exp.cast(value.copy(), "DOUBLE")
    if isinstance(value, exp.Cast) and value.to.this == exp.DataType.Type.TIMESTAMP and isinstance(
            value.this, exp.Literal):
        return _call("unix_millis", value.copy())
    return value.copy()


def _mv(function: Callable[..., exp.Expr], arity: int, most: int | None = None) -> Callable[
        [list[exp.Expr], frozenset[str]], exp.Expr]:
    """A function of a list (its first argument) and ``arity`` (to ``most``) arguments in all."""
    most = most or arity

    def translate_call(args: list[exp.Expr], names: frozenset[str]) -> exp.Expr:
        if not arity <= len(args) <= most:
            expected = str(arity) if arity == most else f"{arity} to {most}"
            raise QueryError(f"a multi-value function takes {expected} argument{'s' if most > 1 else ''} here, "
                             f"got {len(args)}", "UNSUPPORTED_DRUID_SQL")
        return function(_as_list(args[0], names), *(_druid_element(a) for a in args[1:]))
    return translate_call


def _mv_to_array(args: list[exp.Expr], names: frozenset[str]) -> exp.Expr:
    """MV_TO_ARRAY(column): the list itself; as in Druid, of a column only.

    Of a multi-value column grouped by its values: the group's one value, even null (Druid's ``[null]``).
    """
    if not (args and isinstance(args[0], exp.Column)):
        raise QueryError("MV_TO_ARRAY takes a column (as in Druid), not an expression", "UNSUPPORTED_DRUID_SQL")
    if args[0].meta.get(_GROUPED) and len(args) == 1:
        return exp.Array(expressions=[args[0].copy()])
    return _mv(lambda a: a, 1)(args, names)


def _two(function: str, args: list[exp.Expr]) -> list[exp.Expr]:
    if len(args) != 2:
        raise QueryError(f"{function} takes 2 arguments, got {len(args)}", "UNSUPPORTED_DRUID_SQL")
    return args


def _slice(values: exp.Expr, start: exp.Expr, end: exp.Expr | None = None) -> exp.Expr:
    """Druid's ``[start, end)`` of 0-based offsets (to the last without ``end``) as Spark's ``slice``."""
    length = _call("size", values.copy()) if end is None else exp.Sub(this=end, expression=start.copy())
    sliced = _call("slice", values.copy(), exp.Add(this=start.copy(), expression=exp.Literal.number(1)), length)
    return exp.If(this=exp.GT(this=start.copy(), expression=_call("size", values)), true=exp.Null(), false=sliced)


def _position(values: exp.Expr, value: exp.Expr, base: int) -> exp.Expr:
    """The first offset (``base`` 1) or ordinal (``base`` 0) of ``value`` in ``values``; NULL when absent."""
    found = _call("array_position", values, value)
    return exp.Sub(this=_call("nullif", found, exp.Literal.number(0)), expression=exp.Literal.number(base))


def _holds_null(values: exp.Expr) -> exp.Expr:
    """Whether a row holds null: a null row (Druid's ``[]``), or a null value."""
    return exp.or_(exp.Is(this=values.copy(), expression=exp.Null()),
                   _call("exists", values.copy(), _lambda(exp.Is(this=_element(), expression=exp.Null()))))


def _only_nulls(wanted: exp.Expr) -> bool:
    return isinstance(wanted, exp.Array) and bool(wanted.expressions) and all(
        isinstance(e, exp.Null) for e in wanted.expressions)


def _overlap(values: exp.Expr, wanted: exp.Expr) -> exp.Expr:
    """Whether the list ``values`` holds one of ``wanted``'s elements (ARRAY[NULL]: a null row or value).

    As Druid's, false (not Spark's null) when none is shared and a null element is in either list.
    """
    if _only_nulls(wanted):
        return exp.Paren(this=_holds_null(values))
    if isinstance(wanted, exp.Array) and not any(isinstance(e, exp.Null) for e in wanted.expressions):
        return _call("arrays_overlap", _call("array_compact", values), wanted)
    nulls = exp.and_(_call("exists", values.copy(), _lambda(exp.Is(this=_element(), expression=exp.Null()))),
                     _call("exists", wanted.copy(), _lambda(exp.Is(this=_element(), expression=exp.Null()))))
    return exp.Paren(this=exp.or_(_call("arrays_overlap", _call("array_compact", values),
                                        _call("array_compact", wanted)), nulls))


def _contains(values: exp.Expr, wanted: exp.Expr) -> exp.Expr:
    """Whether the list ``values`` holds ``wanted``, or each element of ``wanted`` if it is an array.

    As Druid's, false (not Spark's null) when it does not and holds a null element.
    """
    if _only_nulls(wanted):
        return exp.Paren(this=_holds_null(values))
    values = _call("array_compact", values)
    if isinstance(wanted, exp.Array):  # every element of the array
        return _call("forall", wanted, _lambda(_call("array_contains", values, _element())))
    return _call("array_contains", values, wanted)


def _filtered(druid_name: str, keep: Callable[[exp.Expr, exp.Expr], exp.Expr]) -> Callable[
        [list[exp.Expr], frozenset[str]], exp.Expr]:
    """MV_FILTER_REGEX/MV_FILTER_PREFIX(values, pattern): the values ``keep`` keeps; none is NULL.

    ``values`` may be a text literal (one value) or NULL, as well as a column or a list.
    """
    def translate_call(args: list[exp.Expr], names: frozenset[str]) -> exp.Expr:
        values, pattern = _two(druid_name, args)
        if isinstance(values, exp.Null):
            return exp.cast(exp.Null(), "ARRAY<STRING>")
        listed = exp.Array(expressions=[values.copy()]) if isinstance(values, exp.Literal) else _as_list(values, names)
        return _nonempty(_call("filter", listed, _lambda(keep(_element(), pattern.copy()))))
    return translate_call


MV_FUNCTIONS: dict[str, Callable[[list[exp.Expr], frozenset[str]], exp.Expr]] = {
    "MV_CONTAINS": _mv(_contains, 2),
    "MV_OVERLAP": _mv(_overlap, 2),
    "MV_LENGTH": _mv(lambda a: _null_or(a, _call("size", a.copy())), 1),
    "MV_OFFSET": _mv(lambda a, i: _call("try_element_at", a, exp.Add(this=i, expression=exp.Literal.number(1))), 2),
    "MV_ORDINAL": _mv(lambda a, i: _call("try_element_at", a, i), 2),
    "MV_TO_STRING": _mv(lambda a, sep: _call("array_join", a, sep), 2),
    "MV_TO_ARRAY": _mv_to_array,
    "MV_FILTER_ONLY": _mv(lambda a, keep: _nonempty(_call("filter", a, _lambda(
        _call("array_contains", keep, _element())))), 2),
    "MV_FILTER_NONE": _mv(lambda a, drop: _nonempty(_call("filter", a, _lambda(
        exp.Not(this=_call("array_contains", drop, _element()))))), 2),
    "MV_FILTER_REGEX": _filtered("MV_FILTER_REGEX", lambda v, p: exp.RegexpLike(this=v, expression=p)),
    "MV_FILTER_PREFIX": _filtered("MV_FILTER_PREFIX", lambda v, p: _call("startswith", v, p)),
    "STRING_TO_MV": lambda args, names: _call("split", *(a.copy() for a in args)),
    "MV_APPEND": _mv(lambda a, v: _call("concat", a, exp.Array(expressions=[v])), 2),
    "MV_SLICE": _mv(_slice, 2, 3),
    "MV_OFFSET_OF": _mv(lambda a, v: _position(a, v, 1), 2),
    "MV_ORDINAL_OF": _mv(lambda a, v: _position(a, v, 0), 2),
    "MV_PREPEND": lambda args, names: _call(
        "concat", exp.Array(expressions=[_druid_element(_two("MV_PREPEND", args)[0])]), _as_list(args[1], names)),
    "MV_CONCAT": lambda args, names: _call("concat", *(_as_list(a, names) for a in _two("MV_CONCAT", args))),
}
for _name in ("OFFSET", "ORDINAL", "OFFSET_OF", "ORDINAL_OF", "OVERLAP", "SLICE"):  # the same over arrays
    MV_FUNCTIONS[f"ARRAY_{_name}"] = MV_FUNCTIONS[f"MV_{_name}"]
"""Druid's multi-value and array functions, by name: (arguments, multi-value column names) -> Spark SQL."""


_MV_RESULTS = frozenset({"MV_APPEND", "MV_PREPEND", "MV_CONCAT", "MV_SLICE", "MV_FILTER_ONLY", "MV_FILTER_NONE",
                         "MV_FILTER_REGEX", "MV_FILTER_PREFIX", "STRING_TO_MV"})
"""Functions whose value is multi-value: grouped by, they group by each value, as a column does."""


_PER_VALUE = (exp.Concat, exp.DPipe, exp.Substring, exp.Upper, exp.Lower, exp.Length, exp.Trim, exp.Reverse)
"""Scalar functions Druid applies to each value of a multi-value column (its implicit mapping)."""
_MAPPED = "__mapped"


def is_mv(node: exp.Expr, names: frozenset[str]) -> bool:
    """Whether ``node`` is one of the multi-value columns ``names``."""
    return isinstance(node, exp.Column) and node.name.lower() in names


def _is_mv_result(node: exp.Expr) -> bool:
    """Whether ``node`` is a multi-value function's result or a function mapped over a multi-value column."""
    return (isinstance(node, exp.Anonymous) and str(node.this).upper() in _MV_RESULTS) or bool(node.meta.get(_MAPPED))


def _stringifiable(node: exp.Expr) -> bool:
    """Whether a multi-value result is selected as Druid writes it (see :func:`_stringified`).

    STRING_TO_MV's stays a list: ``split``'s value bound times ``to_json``'s is past the sandbox's limit.
    """
    return _is_mv_result(node) and str(node.this).upper() != "STRING_TO_MV"


def has_mv_results(tree: exp.Expr) -> bool:
    """Whether ``tree`` calls a function whose value is multi-value (grouped by, it groups by each value)."""
    return any(_is_mv_result(node) for node in tree.find_all(exp.Anonymous))


def _mapped(node: exp.Expr, names: frozenset[str]) -> exp.Expr:
    """``f(tags, ...)`` as Druid reads it: ``f`` of each value of the row, and of null for a null row.

    One multi-value column per function: Druid's cross product of two is not supported.
    """
    columns = {c.name.lower() for c in node.find_all(exp.Column) if is_mv(c, names)}
    if len(columns) > 1:
        raise QueryError(f"{node.sql(dialect='spark')}: a function of two multi-value columns (Druid's cross "
                         "product of their values) is not supported", "UNSUPPORTED_DRUID_SQL")
    if isinstance(node, exp.Coalesce) and any(isinstance(a, exp.Array) for a in node.iter_expressions()):
        raise QueryError("COALESCE of a multi-value column and an array: use MV_TO_ARRAY on the column",
                         "UNSUPPORTED_DRUID_SQL")  # as Druid: a list of strings is not an array
    column = next(c for c in node.find_all(exp.Column) if is_mv(c, names))
    if isinstance(node, exp.Coalesce) and is_mv(node.this, names) and node.expressions:  # no lambda needed
        rest = exp.Coalesce(this=node.expressions[0].copy(), expressions=[e.copy() for e in node.expressions[1:]])
        mapped: exp.Expr = exp.Coalesce(this=column.copy(), expressions=[exp.Array(expressions=[rest])])
        mapped.meta[_MAPPED] = True
        return mapped
    values = exp.If(this=exp.Is(this=column.copy(), expression=exp.Null()),
                    true=exp.Array(expressions=[exp.cast(exp.Null(), "STRING")]), false=column.copy())
    body = node.copy().transform(lambda n: _element() if is_mv(n, names) else n)
    mapped = _call("transform", values, _lambda(body))
    mapped.meta[_MAPPED] = True  # (a lambda's value bound counts the other columns once per value)
    return mapped


def _map_per_value(tree: exp.Expr, names: frozenset[str]) -> exp.Expr:
    """Scalar functions over a multi-value column, applied to each value (:func:`_mapped`)."""
    def per_value(node: exp.Expr) -> exp.Expr:
        arguments = [node.this, *node.expressions] if isinstance(node, exp.Coalesce) else list(node.iter_expressions())
        if isinstance(node, exp.Coalesce) and any(_is_mv_result(a) for a in arguments):
            raise QueryError("COALESCE of a multi-value function's value (Druid's differs from a list's) is not "
                             "supported", "UNSUPPORTED_DRUID_SQL")
        if isinstance(node, _PER_VALUE + (exp.Coalesce,)) and any(is_mv(a, names) for a in arguments):
            return _mapped(node, names)
        return node
    return tree.transform(per_value)


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
            if isinstance(key, exp.Column):
                is_key = (isinstance(node, exp.Column) and node.name.lower() == key.name.lower()
                          and node.table in ("", key.table))
            else:
                is_key = node == key
            if not is_key:
                return node
            column = exp.column(value)
            column.meta[_GROUPED] = True  # (MV_TO_ARRAY of it is the group's one value)
            return column
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
    [target] = _mv_operands(predicate, names)
    column = target.copy()
    target.replace(_element())
    test: exp.Expr = exp.Coalesce(this=_call("exists", column, _lambda(predicate)), expressions=[exp.false()])
    if isinstance(node, exp.NEQ):
        test = exp.Not(this=test)
    return _null_or(column, test)


_WHOLE_LIST = (exp.ArraySize, exp.ArrayToString, exp.ArrayConcat, exp.ArrayContains, exp.ArrayContainsAll,
               exp.ArrayOverlaps, exp.ArraySlice, exp.ArrayAppend, exp.ArrayPrepend)
"""Array functions that read a multi-value row as one list (compared, their value is compared, not each value's)."""


def _mv_operands(node: exp.Expr, names: frozenset[str]) -> list[exp.Expr]:
    """The multi-value columns and results in ``node``, outermost first (none inside another).

    Not those an array or ``MV_*`` function reads as a whole list: ``MV_LENGTH(tags) > 1`` compares a number.
    """
    if is_mv(node, names) or _is_mv_result(node):
        return [node]
    if isinstance(node, _WHOLE_LIST) or (isinstance(node, exp.Anonymous) and str(node.this).upper() in MV_FUNCTIONS):
        return []
    return [found for child in node.iter_expressions() for found in _mv_operands(child, names)]


def _stringified(projection: exp.Expr) -> exp.Expr:
    """A multi-value column (or mapped function) selected: the value of a one-value row, else the JSON array text."""
    values = projection.unalias().copy()
    single = exp.EQ(this=_call("size", values.copy()), expression=exp.Literal.number(1))
    text = exp.If(this=single, true=_call("element_at", values.copy(), exp.Literal.number(1)),
                  false=_call("to_json", values.copy()))
    name = projection.alias if isinstance(projection, exp.Alias) else (
        projection.name if isinstance(projection, exp.Column) else "")
    return exp.alias_(text, name, quoted=True) if name else text


def rewrite_multi_value(tree: exp.Expr, names: frozenset[str]) -> exp.Expr:
    """``tree`` (a Druid SQL query) with Druid's semantics for the multi-value columns ``names`` (lower case)."""
    counter = [0]
    tree = _map_per_value(tree, names)
    for select in list(tree.find_all(exp.Select)):
        _exploded(select, names, counter)
    for node in list(tree.find_all(*_COMPARISONS)):
        if len(_mv_operands(node, names)) == 1 and not any(isinstance(a, exp.Select) for a in node.find_all(
                exp.Select)):
            node.replace(_any_value(node, names))
    if isinstance(tree, exp.Select):  # the result's columns (inner queries keep the lists)
        tree.set("expressions", [_stringified(p) if is_mv(p, names) or _stringifiable(p.unalias()) else p
                                 for p in tree.expressions])
    return tree
