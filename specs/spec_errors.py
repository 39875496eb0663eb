"""The one error type of the ``specs`` package.

Every problem found in a supervisor spec is reported as a :class:`SpecError`
carrying ``(path, message)`` pairs.  Paths use Druid's camelCase field names,
dotted, with list indices in brackets: ``spec.dataSchema.metricsSpec[1].type``.
``"$"`` names the document itself (e.g. text that is not JSON at all).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

__all__ = ["SpecError", "join_path", "json_type_name", "key_path"]


class SpecError(ValueError):
    """A supervisor spec (or one value in it) is invalid.

    ``errors`` lists every problem as ``(path, message)``.  Inside the package a
    path may be relative (for example ``"timeZone"`` when a granularity object is
    parsed on its own); the loader prefixes it with the location of the value.
    """

    errors: list[tuple[str, str]]

    def __init__(self, errors: Iterable[tuple[str, str]]) -> None:
        self.errors = list(errors)
        if not self.errors:
            self.errors = [("", "invalid supervisor spec")]
        super().__init__(self._render())

    @classmethod
    def at(cls, path: str, message: str) -> SpecError:
        """Build an error holding a single ``(path, message)`` pair."""
        return cls([(path, message)])

    def prefixed(self, prefix: str) -> SpecError:
        """Return a copy whose paths are relative to ``prefix``."""
        return SpecError((join_path(prefix, path), message) for path, message in self.errors)

    def scrubbed(self, scrub: Callable[[str], str]) -> SpecError:
        """Return a copy with ``scrub`` applied to every message (e.g. to mask secret values)."""
        return SpecError((path, scrub(message)) for path, message in self.errors)

    def _render(self) -> str:
        lines = [f"{path}: {message}" if path else message for path, message in self.errors]
        if len(lines) == 1:
            return lines[0]
        return f"{len(lines)} problems in supervisor spec:\n" + "\n".join(f"  {line}" for line in lines)

    def __str__(self) -> str:
        return self._render()


def join_path(prefix: str, path: str) -> str:
    """Join two path fragments: ``join_path("a.b", "c")`` -> ``"a.b.c"``, ``"[2]"`` -> ``"a.b[2]"``."""
    if not path:
        return prefix
    if not prefix:
        return path
    if path.startswith("["):
        return prefix + path
    return f"{prefix}.{path}"


def key_path(key: str) -> str:
    """Return the path fragment for a mapping key: ``topic``, or ``["bootstrap.servers"]`` when not an identifier."""
    if key.isidentifier():
        return key
    return "[" + json.dumps(key) + "]"


def json_type_name(value: object) -> str:
    """Name the JSON type of a decoded value, for messages (``"array"``, ``"object"``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
