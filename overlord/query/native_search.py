"""Druid's native ``search`` query: the dimension values that match, with the rows holding each.

One SQL statement (a ``UNION ALL`` of one grouped branch per searched dimension) counts the rows of
each (time bucket, value) after the query's intervals and filter; the match is tested on each value
after a multi-value row is split into its values (Spark moves a condition on a plain column below the
grouping). Matching, as Druid's ``SearchQuerySpec`` classes do: ``insensitive_contains`` and ``contains``
(``caseSensitive``, false unless given), ``fragment`` (every one of ``values``), ``regex`` (a match
anywhere) never match null; ``all``, the default without ``query``, matches every value, null too.
Hits are ordered by ``sort`` (``lexicographic``, the default, ``strlen`` or ``numeric``: Druid's
``StringComparators``), then by dimension name, and cut to ``limit`` (default 1000) per bucket.
A bucket without hits is left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
from sqlglot import exp

from overlord.query.formats import QueryResult
from overlord.query.native_checks import bad, field
from specs.filters import check_regex
from specs.spec_errors import SpecError

__all__ = ["run_search", "sort_key"]

_Match = Callable[[exp.Expr], exp.Expr | None]
_QUERY_KEYS = {"insensitive_contains": {"value"}, "contains": {"value", "caseSensitive"},
               "fragment": {"values", "caseSensitive"}, "regex": {"pattern"}, "all": set()}
"""The fields of each search query spec (besides ``type``)."""
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # what Java's BigDecimal reads


def run_search(query: Mapping[str, Any], datasource: str, bucket: exp.Expr, where: exp.Expr | None,
               run: Callable[[exp.Expr], QueryResult]) -> list[dict[str, Any]]:
    """Druid's answer to the search ``query``; ``bucket``/``where``: the time bucket and the intervals and filter."""
    match = _match(query.get("query", {"type": "all"}), "$.query")
    sort = query.get("sort") or {}
    order = sort_key(sort.get("type", "lexicographic") if isinstance(sort, Mapping) else sort, "$.sort.type")
    limit = query.get("limit", 1000)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise bad("$.limit", f"expected a whole number, got {limit!r}")
    table = exp.Table(this=exp.to_identifier(datasource, quoted=True))
    schema = {f.name: f.type for f in run(exp.select(exp.Star()).from_(table).limit(0)).table.schema}
    dimensions = [(column, output) for column, output in _dimensions(query.get("searchDimensions"), schema)
                  if column in schema]  # a dimension the datasource lacks has no values (Druid: no hits)
    if not dimensions:
        return []
    branches = [_branch(column, output, _is_text(schema[column]), table, bucket.copy(), where, match)
                for column, output in dimensions]
    statement: exp.Query = branches[0]
    for branch in branches[1:]:
        statement = exp.union(statement, branch, distinct=False)
    by_bucket: dict[str, list[dict[str, Any]]] = {}
    result = run(statement)
    for time, dimension, value, count in result.rows():
        by_bucket.setdefault(time, []).append({"dimension": dimension, "value": value, "count": count})
    return [{"timestamp": time, "result": sorted(hits, key=lambda h: (order(h["value"]), h["dimension"]))[:limit]}
            for time, hits in sorted(by_bucket.items())]


def _branch(column: str, output: str, text: bool, table: exp.Table, bucket: exp.Expr, where: exp.Expr | None,
            match: _Match) -> exp.Select:
    """(bucket, dimension, value, rows) of one dimension's matching values (``text``: no cast needed)."""
    value: exp.Expr = exp.column(column, quoted=True)
    if not text:  # a numeric dimension is searched as its values' text, as Druid's
        value = exp.cast(value, "VARCHAR")
    grouped = exp.select(exp.alias_(bucket, "__bucket", quoted=True),
                         exp.alias_(value, "value", quoted=True),
                         exp.alias_(exp.Count(this=exp.Star()), "count", quoted=True)).from_(table)
    if where is not None:
        grouped = grouped.where(where.copy())
    grouped = grouped.group_by(bucket.copy(), value.copy())
    outer = exp.select(exp.column("__bucket", quoted=True), exp.alias_(exp.Literal.string(output), "dimension",
                                                                      quoted=True),
                       exp.column("value", quoted=True), exp.column("count", quoted=True)).from_(
        grouped.subquery("hits"))
    value_match = match(exp.column("value", quoted=True))
    return outer.where(value_match) if value_match is not None else outer


def _is_text(kind: pa.DataType) -> bool:
    """A string column, or a multi-value one (a list of strings)."""
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)
                or (pa.types.is_list(kind) and pa.types.is_string(kind.value_type)))


def _dimensions(specs: Any, schema: Mapping[str, pa.DataType]) -> list[tuple[str, str]]:
    """(column, output name) per searched dimension; without ``searchDimensions``, every string column."""
    if specs is None:
        return [(name, name) for name, kind in schema.items() if name != "__time" and _is_text(kind)]
    if not isinstance(specs, list):
        raise bad("$.searchDimensions", f"expected a list of dimensions, got {specs!r}")
    out = []
    for i, spec in enumerate(specs):
        if isinstance(spec, str):
            out.append((spec, spec))
        elif isinstance(spec, Mapping) and spec.get("type", "default") == "default":
            column = field(spec, "dimension", f"$.searchDimensions[{i}]")
            out.append((column, str(spec.get("outputName") or column)))
        else:
            raise bad(f"$.searchDimensions[{i}]", "only plain and default dimension specs are supported")
    return out


def _match(spec: Any, path: str) -> _Match:
    """The search query spec as a condition on a value (None: every value, null too)."""
    if not isinstance(spec, Mapping):
        raise bad(path, f"expected a search query spec object, got {spec!r}")
    kind = field(spec, "type", path)
    if kind not in _QUERY_KEYS:
        raise bad(f"{path}.type", f"search query type {kind!r} is not supported ({', '.join(_QUERY_KEYS)} are)")
    unknown = sorted(set(spec) - _QUERY_KEYS[kind] - {"type"})
    if unknown:
        hint = " (Druid reads caseSensitive)" if unknown[0] == "case_sensitive" else ""
        raise bad(f"{path}.{unknown[0]}", f"a {kind} search query spec does not take {unknown[0]!r}{hint}")
    if kind == "all":
        return lambda _value: None
    if kind == "regex":
        pattern = field(spec, "pattern", path)
        try:
            check_regex(pattern, "pattern")
        except SpecError as exc:
            raise bad(f"{path}.pattern", exc.errors[0][1]) from None
        return lambda value: exp.RegexpLike(this=value, expression=exp.Literal.string(pattern))
    sensitive = spec.get("caseSensitive", False) if kind != "insensitive_contains" else False
    if not isinstance(sensitive, bool):
        raise bad(f"{path}.caseSensitive", f"expected true or false, got {sensitive!r}")
    if kind == "fragment":
        values = field(spec, "values", path, list)
        if not all(isinstance(v, str) for v in values):
            raise bad(f"{path}.values", f"expected a list of strings, got {values!r}")
    else:
        values = [field(spec, "value", path)]
    return lambda value: exp.and_(exp.Not(this=exp.Is(this=value, expression=exp.Null())),
                                  *(_contains(value.copy(), text, sensitive) for text in values))


def _contains(value: exp.Expr, text: str, sensitive: bool) -> exp.Expr:
    needle: exp.Expr = exp.Literal.string(text)
    if not sensitive:
        value, needle = exp.Lower(this=value), exp.Lower(this=needle)
    return exp.Anonymous(this="CONTAINS_STRING", expressions=[value, needle])


def sort_key(kind: Any, path: str) -> Callable[[str | None], tuple[Any, ...]]:
    """The key that orders values as Druid's ``kind`` string comparator does (null first)."""
    if kind == "lexicographic":
        return lambda v: (v is not None, (v or "").encode("utf-8"))
    if kind == "strlen":  # Java's length: UTF-16 code units
        return lambda v: (v is not None, len((v or "").encode("utf-16-le")) // 2, (v or "").encode("utf-8"))
    if kind == "numeric":  # text that is no number first, in lexicographic order; then numbers by value
        return lambda v: ((0, b"", Decimal(0)) if v is None else (1, v.encode("utf-8"), Decimal(0))
                          if not _NUMBER.fullmatch(v) else (2, b"", Decimal(v)))
    raise bad(path, f"sort {kind!r} is not supported (lexicographic, strlen and numeric are)")
