"""SQL for reading one field of a record: its JSON path, its text, its type, and a filter over fields."""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp

from indexing_task.rollup_schema import TIME
from indexing_task.sql_text import quote_string as _lit
from specs.filters import filter_condition
from specs.flatten import PathStep

__all__ = ["SQL_TYPES", "cast_sql", "extract_sql", "filter_sql", "json_path", "metadata_column", "metadata_text",
           "timestamp_sql"]

SQL_TYPES = {"string": "VARCHAR", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE"}
"""The DuckDB type a dimension's or metric's values are read as."""


def cast_sql(text: str, sql_type: str) -> str:
    """SQL for ``text`` read as ``sql_type`` (NULL where it is not one)."""
    if sql_type == "VARCHAR":
        return text
    if sql_type == "BIGINT":  # Druid truncates fractional input to long
        return (f"CASE WHEN contains({text}, '.') OR contains({text}, 'e') OR contains({text}, 'E') "
                f"THEN try_cast(trunc(try_cast({text} AS DOUBLE)) AS BIGINT) "
                f"ELSE try_cast({text} AS BIGINT) END")
    return f"try_cast({text} AS {sql_type})"


def filter_sql(filter_spec: object, text: Callable[[str], str]) -> str:
    """DuckDB SQL of a Druid filter over fields as their ``text`` SQL gives them, and ``__time`` as ``__t``."""
    def column(name: str) -> exp.Expression:
        return exp.column("__t") if name == TIME else sqlglot.parse_one(text(name), read="duckdb")  # type: ignore[return-value]
    return filter_condition(filter_spec, column).sql(dialect="duckdb")


def metadata_column(source: str) -> str:
    """The batch column holding a Kafka record's metadata ``source`` (the key, a header, ...)."""
    return "__kafka_" + ("key" if source.startswith("key") else source)


def metadata_text(source: str, column: str) -> str:
    """SQL for a metadata field's text: the key's first column, the timestamp in ms, the topic, a header."""
    if source.startswith("key:"):
        return f"split_part(try(decode({column})), {_lit(source.split(':', 2)[2])}, 1)"
    if source == "timestamp":
        return f"{column}::VARCHAR"
    return column if source == "topic" else f"try(decode({column}))"


def extract_sql(function: str, paths: dict[str, str], value: str = "__s") -> str:
    """SQL extracting the values at ``paths`` from the JSON ``value`` as a list (NULL when there are none)."""
    return f"{function}({value}, [{', '.join(map(_lit, paths.values()))}])" if paths else "NULL"


def json_path(steps: tuple[PathStep, ...]) -> str:
    """DuckDB's JSON path for ``steps`` (keys quoted; ``[#-1]`` is the last array element)."""
    def step(key: PathStep) -> str:
        if isinstance(key, int):
            return f"[{key}]" if key >= 0 else f"[#{key}]"
        return '."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "$" + "".join(map(step, steps))


def timestamp_sql(text: str, fmt: str) -> str:
    """SQL for the event time a timestamp's ``text`` gives in format ``fmt`` (NULL where it gives none)."""
    iso = f"try_cast({text} AS TIMESTAMPTZ)::TIMESTAMP"
    number = f"try_cast({text} AS BIGINT)"
    by_format = {
        "iso": iso,
        "millis": f"try(epoch_ms({number}))",
        "posix": f"try(to_timestamp(try_cast({text} AS DOUBLE))::TIMESTAMP)",
        "micro": f"try(make_timestamp({number}))",
        "nano": f"try(make_timestamp({number} // 1000))",
        "auto": f"CASE WHEN {number} IS NOT NULL THEN try(epoch_ms({number})) ELSE {iso} END",
    }
    return by_format[fmt]
