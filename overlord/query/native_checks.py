"""The checks native queries share: a 400 naming a JSON path, and a required field of a given type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from overlord.query.query_errors import QueryError

__all__ = ["bad", "field"]


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
