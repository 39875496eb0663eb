"""Quoting for the DuckDB SQL the parse pass is built from: names and values never go in raw."""

from __future__ import annotations

__all__ = ["quote_identifier", "quote_string"]


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def quote_string(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"
