"""Druid's JSON ``flattenSpec``: input fields named by a root field, a JSONPath or a jq path.

Only paths that name one value are supported: object keys (``$.a.b``, ``$['a b']``, jq's
``.a."b c"``) and array positions (``$.a[0]``, ``$.a[-1]`` for the last). Deep scans (``..``),
wildcards, filters, slices and functions are refused naming the field, since a path we read
differently would ingest other data.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from specs import limits
from specs.data_schema import Name, SpecModel, duplicates
from specs.spec_errors import SpecError

__all__ = ["FlattenField", "FlattenSpec", "PathStep", "parse_path"]

PathStep = str | int
"""One step of a path: an object key, or an array position (negative counts from the end)."""

_STEP = re.compile(r"""
    \.(?P<name>[^.\[\]\s'"()*?@$,:|\\]+)          # .key
  | \.?\[\s*(?P<index>-?\d+)\s*\]                  # [3], [-1] (jq: also .[3])
  | \.?\[\s*'(?P<single>(?:[^'\\]|\\.)*)'\s*\]     # ['key']
  | \.?\[\s*"(?P<double>(?:[^"\\]|\\.)*)"\s*\]     # ["key"] (jq: also .["key"])
  | \.\s*"(?P<jq>(?:[^"\\]|\\.)*)"                 # jq's ."key"
""", re.VERBOSE)


def parse_path(expr: str, kind: Literal["path", "jq"]) -> tuple[PathStep, ...]:
    """The steps of a JSONPath (``$.a[0]``) or jq path (``.a[0]``); :class:`SpecError` if unsupported."""
    text = expr.strip()
    if kind == "path":
        if not text.startswith("$"):
            raise SpecError.at("expr", f"a JSONPath starts with '$', got {expr!r}")
        text = text[1:]
    elif not text.startswith("."):
        raise SpecError.at("expr", f"a jq path starts with '.', got {expr!r}")
    steps: list[PathStep] = []
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None or text.startswith("..", position):
            raise SpecError.at("expr", f"{expr!r} is not supported at {text[position:]!r}: a path may hold only keys "
                                       "and array positions (no deep scan, wildcard, filter, slice or function)")
        if match["index"] is not None:
            steps.append(int(match["index"]))
        else:
            quoted = next((match[g] for g in ("single", "double", "jq") if match[g] is not None), None)
            steps.append(match["name"] if quoted is None else re.sub(r"\\(.)", r"\1", quoted))
        position = match.end()
    if not steps:
        raise SpecError.at("expr", f"{expr!r} names the whole record; name a field in it")
    return tuple(steps)


class FlattenField(SpecModel):
    """One input field: ``root`` (a top-level field of that name), ``path`` (JSONPath) or ``jq``."""

    type: Literal["root", "path", "jq"]
    """Where the field's value comes from."""
    name: Name = Field(min_length=1)
    """The input field's name, as dimensions, metrics, filters and the timestampSpec use it."""
    expr: Annotated[str, limits.at_most(limits.MAX_PATH_LENGTH, "characters")] | None = None
    """The JSONPath or jq expression (path and jq only)."""

    @model_validator(mode="after")
    def _valid_expression(self) -> FlattenField:
        if self.type == "root":
            if self.expr is not None and self.expr != self.name:
                raise SpecError.at("expr", "a root field takes no expr (it reads the top-level field 'name')")
        elif self.expr is None:
            raise SpecError.at("expr", f"required for a {self.type} field")
        else:
            parse_path(self.expr, self.type)
        return self

    @property
    def steps(self) -> tuple[PathStep, ...]:
        """The path to the value in the record."""
        return (self.name,) if self.type == "root" or self.expr is None else parse_path(self.expr, self.type)


class FlattenSpec(SpecModel):
    """Which input fields a JSON record offers: its top-level fields (discovery) and listed ones."""

    use_field_discovery: bool = True
    """Offer every top-level field under its own name (false: only the listed fields)."""
    fields: Annotated[tuple[FlattenField, ...], limits.at_most(limits.MAX_FLATTEN_FIELDS, "fields")] = Field(
        default=(), strict=False)
    """Fields read from a top-level name, a JSONPath or a jq path."""

    @model_validator(mode="after")
    def _unique_names(self) -> FlattenSpec:
        errors = duplicates([item.name for item in self.fields], "fields", "field")
        if errors:
            raise SpecError(errors)
        return self

    def path_of(self, name: str) -> tuple[PathStep, ...] | None:
        """The path of input field ``name``, or None when the record does not offer it."""
        for item in self.fields:
            if item.name == name:
                return item.steps
        return (name,) if self.use_field_discovery else None
