"""The parse pass's SQL: each record's fields read, typed and checked, and each bad record given its reason.

The query reads the registered ``batch`` (``__i``, ``__raw``, the Kafka metadata columns) and gives a
row per record: its reason (NULL for a good one), its event time ``__t``, its time and segment buckets,
each dimension and each metric's input ``__m<i>`` (and, for a filtered aggregator, ``__mf<i>``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

import pyarrow as pa

from indexing_task.buckets import bucket_start_sql
from indexing_task.field_sql import (
    SQL_TYPES,
    cast_sql,
    extract_sql,
    filter_sql,
    json_path,
    metadata_column,
    metadata_text,
    timestamp_sql,
)
from indexing_task.metric_sql import pair_sql
from indexing_task.multi_value_sql import array_reason, elements_sql, multi_value_sql, nested_reason
from indexing_task.rollup_schema import SEGMENT_START, TIME, Dimension, Metric, RollupSchema
from indexing_task.sql_text import quote_identifier as _q
from indexing_task.sql_text import quote_string as _lit
from indexing_task.transforms import compile_expression
from indexing_task.typed_fields import VALUE_JSON, typed_text
from indexing_task.values_sql import values_sql
from specs.expressions import parse_expression, referenced_fields
from specs.filters import filter_columns
from specs.granularity import ALL_END, ALL_START

__all__ = ["MAX_TIME", "MIN_TIME", "ParseSql", "bounds_sql", "parse_sql"]

MIN_TIME, MAX_TIME = ALL_START, ALL_END
"""Event times outside ``[MIN_TIME, MAX_TIME)`` (UTC) are unparseable: the range every granularity's
buckets, Arrow, Parquet and Python's datetime all hold (``ALL`` granularity's interval)."""


_NOT_JSON_OBJECT = ("WHEN __s IS NULL THEN 'not valid UTF-8' WHEN NOT __valid THEN 'invalid JSON' "
                    "WHEN NOT __ok THEN 'not a JSON object'")
"""The reasons a record's JSON text is unreadable (typed rows are read before the parse)."""


def bounds_sql(min_time: datetime | None, max_time: datetime | None) -> str:
    """SQL for whether the event time ``__t`` is within ``[min_time, max_time]`` (either may be open)."""
    conds = []
    if min_time is not None:
        conds.append(f"__t >= TIMESTAMP '{min_time.astimezone(UTC).replace(tzinfo=None).isoformat()}'")
    if max_time is not None:
        conds.append(f"__t <= TIMESTAMP '{max_time.astimezone(UTC).replace(tzinfo=None).isoformat()}'")
    return " AND ".join(conds) or "true"


def parse_sql(schema: RollupSchema, bounds: str, value_type: pa.StructType | None = None,
              arrays: bool = True) -> str:
    """The parse query for ``schema``; records whose event time is not within ``bounds`` are not kept.

    ``value_type``: the batch holds its records as typed rows ``__v`` of this type, not as JSON text.
    ``arrays=False``: no record's JSON text holds a ``[`` (so no array), and the query reads no arrays.
    """
    return ParseSql(schema, value_type, arrays).sql(bounds)


class ParseSql:
    """Builds the parse query of one schema: what each field is read as, and the checks a record must pass.

    The columns (``typed``) and the reasons' ``WHEN`` clauses (``checks``, then ``arrays``, the checks
    for arrays in string dimensions) are collected once, in the order the query lists them. Records
    are JSON text ``__s``, or typed rows ``__v`` of ``value_type`` (:mod:`indexing_task.typed_fields`).

    ``arrays=False`` (JSON text without a ``[``) leaves out what only an array in a string dimension
    answers: its one-value read and its check. The same answers, a query half as long to plan (~9 ms of a
    trickle's ~20 ms task with Druid's tutorial spec's 16 string dimensions).
    """

    def __init__(self, schema: RollupSchema, value_type: pa.StructType | None = None, arrays: bool = True) -> None:
        s = self.schema = schema
        self.value_type = value_type
        self.arrays_possible = arrays or value_type is not None
        self.json = "__s" if value_type is None else VALUE_JSON  # the record as JSON
        self.filter_spec = None if s.filter_json is None else json.loads(s.filter_json)
        self.transforms = {name: parse_expression(text) for name, text in s.transforms}
        self.outputs = {name: f'"__x{i}"' for i, name in enumerate(self.transforms)}  # each transform's JSON token
        self.metric_filters = {i: json.loads(m.filter_json) for i, m in enumerate(s.metrics)
                               if m.filter_json is not None}
        filtered = [name for f in (self.filter_spec, *self.metric_filters.values()) for name in filter_columns(f)]
        needed = [*(d.name for d in s.dimensions), *(f for m in s.metrics for f in m.fields),
                  *(name for name in filtered if name != TIME)]
        self.located = dict(s.input_paths)
        self.metadata = {name: (source, _q(metadata_column(source))) for name, source in s.metadata}
        self.paths = self._offered(n for n in [s.timestamp_column, *(n for n in needed if n not in self.outputs)]
                                   if n not in self.metadata)
        inputs = [f for e in self.transforms.values() for f in referenced_fields(e) if f != TIME]
        counted = [*(f for m in s.metrics if m.type == "string" and m.sketch is not None for f in m.fields),
                   *(d.name for d in s.dimensions if d.multi_value)]
        self.tokens = self._offered(f for f in [*inputs, *(f for f in counted if f not in self.outputs)]
                                    if f not in self.metadata)
        self.index, self.token_index = ({name: i for i, name in enumerate(p, 1)} for p in (self.paths, self.tokens))
        self.typed: list[str] = []
        self.checks: list[str] = []
        self.arrays: list[str] = []
        self._add_nested_checks()  # first: its value fails any other check too
        for d in s.dimensions:
            self._add_dimension(d)
        for i, m in enumerate(s.metrics):
            self._add_metric(i, m)
        self._add_metadata_checks()
        self._add_case_clash_checks()

    def _offered(self, names: Iterable[str]) -> dict[str, str]:
        """The JSON paths of the ``names`` a record offers (by its flattenSpec), in order."""
        steps = {name: self.located.get(name, (name,)) for name in dict.fromkeys(names)}
        return {name: json_path(path) for name, path in steps.items() if path is not None}

    def raw(self, name: str) -> str:
        """SQL for an input field's value as text; NULL where the record does not offer it."""
        if name in self.metadata:
            return metadata_text(*self.metadata[name])
        if name not in self.index:
            return "NULL::VARCHAR"
        typed = self._typed_text(name)
        return f"({typed})" if typed is not None else f"__f[{self.index[name]}]"

    def text(self, name: str) -> str:
        """SQL for a field's value as text, as dimensions, metrics and the filter see it (transformed)."""
        return f"d_str({self.outputs[name]})" if name in self.outputs else self.raw(name)

    def token(self, name: str) -> str:
        """SQL for an input field's value as a JSON token (as transforms read it); NULL where it is missing."""
        if name in self.metadata:  # the timestamp is a LONG, the key, topic and headers strings
            text = self.raw(name)
            return f"{text}" if self.metadata[name][0] == "timestamp" else f"d_quote({text})"
        return f"nullif(__j[{self.token_index[name]}], 'null')" if name in self.token_index else "NULL::VARCHAR"

    def _add_nested_checks(self) -> None:
        """Typed discovery's checks: a JSON array or object in a field seen holding one makes a record bad."""
        for name in self.schema.nested_fields:
            self.checks.append(f"WHEN json_type({self.json}, {_lit(json_path((name,)))}) IN ('ARRAY', 'OBJECT') THEN "
                               f"{_lit(nested_reason(name))}")

    def _dimension_value(self, d: Dimension, single_path: bool) -> str:
        """SQL for a dimension's text before its cast: discovered booleans as 1/0, a one-value array as its value."""
        value = self.text(d.name)
        if d.discovered and d.type != "string":  # strict booleans: true is 1
            value = f"CASE {value} WHEN 'true' THEN '1' WHEN 'false' THEN '0' ELSE {value} END"
        elif d.discovered and d.name in self.paths:  # as a value of another batch would be widened to text
            kind = f"json_type({self.json}, {_lit(self.paths[d.name])})"
            value = (f"CASE {kind} WHEN 'BOOLEAN' THEN CASE {value} WHEN 'true' THEN '1' ELSE '0' END "
                     f"WHEN 'DOUBLE' THEN java_double({value}::DOUBLE) ELSE {value} END")
        if single_path:  # as in Druid, an array of at most one value is that value (or null)
            kind, first = f"json_type({self.json}, {_lit(self.paths[d.name])})", _lit(self.paths[d.name] + "[0]")
            value = (f"CASE WHEN left({value}, 1) = '[' AND {kind} = 'ARRAY' "
                     f"THEN json_extract_string({self.json}, {first}) ELSE {value} END")
        return value

    def _add_dimension(self, d: Dimension) -> None:
        """A dimension's typed column, and its check: wrong type, a transform's array, or an array of values."""
        single_path = d.type == "string" and not d.multi_value and not d.discovered and d.name in self.paths \
            and d.name not in self.outputs and self._typed_text(d.name) is None and self.arrays_possible
        value = self._dimension_value(d, single_path)
        if d.multi_value:
            values, check = multi_value_sql(self.outputs.get(d.name) or self.token(d.name), value, d)
            self.typed.append(f"{values} AS {_q(d.name)}")
            self.checks.append(check)
            return
        self.typed.append(f"{cast_sql(value, SQL_TYPES[d.type])} AS {_q(d.name)}")
        if d.type != "string":
            self.checks.append(f"WHEN {value} IS NOT NULL AND {_q(d.name)} IS NULL "
                               f"THEN {_lit('wrong type for ' + d.name + ' (' + d.type + ')')}")
        elif d.name in self.outputs:  # transforms' values are JSON tokens: an array or object shows at once
            self.checks.append(f"WHEN left({self.outputs[d.name]}, 1) IN ('[', '{{') THEN "
                               f"{_lit(f'transform {d.name} gave a JSON array or object, not a string')}")
        elif single_path:  # an array of several values: the parse starts again, the dimension multi-value
            path = self.paths[d.name]
            self.arrays.append(f"WHEN left({self.text(d.name)}, 1) = '[' "
                               f"AND json_type({self.json}, {_lit(path)}) = 'ARRAY' "
                               f"AND (json_array_length({self.json}, {_lit(path)}) > 1 "
                               f"OR json_type({self.json}, {_lit(path + '[0]')}) IN ('ARRAY', 'OBJECT')) "
                               f"THEN {_lit(array_reason(d.name))}")

    def _add_metric(self, i: int, m: Metric) -> None:
        """Metric ``i``'s input column ``__m<i>`` (a value, a pair, or a sketch's list), and its type check."""
        if not m.fields:
            return
        if m.kind in ("first", "last"):  # (time, value): the record's own time orders values, as in Druid
            pair, pair_check = pair_sql(i, self.text(m.fields[0]), m)
            self.typed.append(f"{pair} AS __m{i}")
            self.checks += [pair_check] if pair_check else []
            return
        if m.type == "string":  # a sketch's values, as a list: a cardinality's fields, or their combination
            if m.by_row:
                combined = ", ".join(f"coalesce({self.text(f)}, chr(0))" for f in m.fields)
                self.typed.append(f"[concat_ws(chr(1), {combined})] AS __m{i}")
            else:  # each element of a JSON array is a value, as in Druid
                lists = ", ".join(elements_sql(self.outputs.get(f) or self.token(f), self.text(f)) for f in m.fields)
                self.typed.append(f"flatten([{lists}]) AS __m{i}")
            return
        value = self.text(m.fields[0])
        self.typed.append(f"{cast_sql(value, SQL_TYPES[m.type])} AS __m{i}")
        skipped = f"__mf{i} AND " if i in self.metric_filters else ""  # Druid reads a value only to aggregate it
        self.checks.append(f"WHEN {skipped}{value} IS NOT NULL AND __m{i} IS NULL "
                           f"THEN {_lit('wrong type for ' + m.fields[0] + ' (' + m.type + ')')}")

    def _add_metadata_checks(self) -> None:
        """The check refusing a quoted first column of a CSV key."""
        for name, (source, column) in self.metadata.items():
            if source.startswith("key:csv:"):  # a quoted first column may hold commas: not read rather than wrong
                self.checks.append(f"WHEN left(try(decode({column})), 1) = '\"' THEN "
                                   f"{_lit(f'a quoted CSV key ({name}) is not supported')}")

    def _add_case_clash_checks(self) -> None:
        """The checks refusing a field whose name differs only in case from a column's."""
        for name in self.schema.case_clashes:
            column = next(c for c in self.schema.output_columns if c.lower() == name.lower())
            self.checks.append(f"WHEN json_type({self.json}, {_lit(json_path((name,)))}) <> 'NULL' THEN "
                               f"{_lit(f'field {name} differs only in case from column {column}')}")

    def _timestamp_text(self) -> str:
        """SQL for the timestamp field's text (the ``missingValue`` where it is missing)."""
        ts_text = self.raw(self.schema.timestamp_column)
        if self.schema.missing_timestamp is not None:
            ts_text = f"coalesce({ts_text}, {_lit(self.schema.missing_timestamp)})"
        return ts_text

    def _typed_text(self, name: str) -> str | None:
        """SQL for a field's text straight from its typed column (None: from the record's JSON, or JSON input)."""
        if self.value_type is None:
            return None
        return typed_text(self.value_type, self.located.get(name, (name,)) or ())

    def _extract_columns(self) -> list[str]:
        """The columns holding the record's fields as text (``__f``) and as JSON tokens (``__j``)."""
        texts = extract_sql("json_extract_string", self.paths, self.json)
        if self.value_type is not None and self.paths:
            texts = "[" + ", ".join(self._typed_text(name) or f"json_extract_string({self.json}, {_lit(path)})"
                                    for name, path in self.paths.items()) + "]"
        extract = [f"CASE WHEN __ok THEN {texts} END AS __f"]
        if self.tokens:
            extract.append(f"CASE WHEN __ok THEN {extract_sql('json_extract', self.tokens, self.json)}::VARCHAR[] "
                           "END AS __j")
        return extract

    def _read_sql(self, carried: str) -> str:
        """The CTEs giving each record (``__s``, or ``__v``), whether it is readable (``__ok``), and why not."""
        if self.value_type is not None:
            return (f"{values_sql(carried, None, typed=True)}, "
                    f"obj AS (SELECT {carried}, __is_null, __problem, __v, __problem IS NULL AS __ok FROM src)")
        return (f"{values_sql(carried, self.schema.delimited, self.schema.decoder is not None)}, "
                f"obj AS (SELECT {carried}, __is_null, __problem, __s, coalesce(json_valid(__s), false) AS __valid, "
                f"coalesce(json_valid(__s) AND starts_with(ltrim(__s), '{{'), false) AS __ok FROM src)")

    def sql(self, bounds: str) -> str:
        """The whole query: the CTEs reading, typing and filtering the batch, then each record's reason."""
        s = self.schema
        checks = [*self.checks, *([f"WHEN contains({self.json}::VARCHAR, '[') THEN CASE {' '.join(self.arrays)} END"]
                                  if self.arrays else [])]  # last: one scan for '[' spares per-dimension checks
        computed = [f"{compile_expression(expr, self.token, 'epoch_ms(__t)')} AS {self.outputs[name]}"
                    for name, expr in self.transforms.items()]
        offsets = [metadata_column("offset")] if s.has_pairs else []
        carried = ", ".join(["__i", *dict.fromkeys([*(column for _, column in self.metadata.values()), *offsets])])
        columns = [_q(d.name) for d in s.dimensions] + [f"__m{i}" for i, m in enumerate(s.metrics) if m.fields]
        kept = "true" if self.filter_spec is None else filter_sql(self.filter_spec, self.text)
        matched = [f"coalesce({filter_sql(f, self.text)}, false) AS __mf{i}" for i, f in self.metric_filters.items()]
        ts_text, extract = self._timestamp_text(), ", ".join(self._extract_columns())
        return f"""
            WITH {self._read_sql(carried)},
            ext AS (SELECT *, {extract} FROM obj),
            timed AS (SELECT *, {timestamp_sql(ts_text, s.timestamp_format)} AS __t FROM ext),
            transformed AS (SELECT *{"".join(", " + c for c in computed)} FROM timed),
            typed AS (SELECT *{"".join(", " + c for c in self.typed)} FROM transformed),
            kept AS (SELECT *, coalesce({kept}, false) AS __kept{"".join(", " + c for c in matched)} FROM typed)
            SELECT __i, __kept,{"".join(f" __mf{i}," for i in self.metric_filters)}
                CASE WHEN __is_null THEN 'null value'
                     WHEN __problem IS NOT NULL THEN __problem
                     {"" if self.value_type is not None else _NOT_JSON_OBJECT}
                     WHEN {ts_text} IS NULL THEN 'missing timestamp'
                     WHEN __t IS NULL THEN 'invalid timestamp'
                     WHEN __t = TIMESTAMP '1970-01-01' AND NOT ascii(ltrim({ts_text})) BETWEEN 48 AND 57
                         THEN 'invalid timestamp'
                     WHEN NOT (__t >= TIMESTAMP '{MIN_TIME:%Y-%m-%d}' AND __t < TIMESTAMP '{MAX_TIME:%Y-%m-%d}')
                         THEN {_lit(f"timestamp out of range (supported: {MIN_TIME:%Y-%m-%d} to {MAX_TIME:%Y-%m-%d})")}
                     WHEN NOT __kept OR NOT ({bounds}) THEN NULL
                     {" ".join(checks)}
                END AS __reason,
                __t, {bucket_start_sql(s.query_granularity, "__t")} AS {TIME},
                {bucket_start_sql(s.segment_granularity, "__t")} AS {SEGMENT_START}
                {"".join(", " + c for c in columns)}
            FROM kept"""
