"""The checks native queries share: a 400 naming a JSON path, and a required field of a given type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from overlord.query.query_errors import QueryError

__all__ = ["GRANULARITIES", "bad", "field"]

GRANULARITIES = {"second": "PT1S", "minute": "PT1M", "five_minute": "PT5M", "ten_minute": "PT10M",
                 "fifteen_minute": "PT15M", "thirty_minute": "PT30M", "hour": "PT1H", "six_hour": "PT6H",
                 "day": "P1D", "week": "P1W", "month": "P1M", "quarter": "P3M", "year": "P1Y"}
"""Druid's named granularities as ISO periods (``all`` and ``none`` are not periods)."""


def bad(path: str, message: str) -> QueryError:
    """The 400 of a native query Druid would answer otherwise or refuse, naming ``path`` (``$.having.type``)."""
    return QueryError(f"{path}: {message}", "INVALID_NATIVE_QUERY")


def field(query: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...] = str) -> Any:
    """``query[key]``, which must be there and of type ``kind``."""
    if key not in query:
        raise bad(f"{path}.{key}", "is required")
    if not isinstance(query[key], kind):
        raise bad(f"{path}.{key}", f"expected {getattr(kind, '__name__', kind)}, got {query[key]!r}")
    return query[key]
