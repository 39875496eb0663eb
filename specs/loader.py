"""Reading a supervisor spec from JSON text or decoded JSON, with path-named errors."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from specs.limits import MAX_JSON_DEPTH
from specs.spec_errors import SpecError, join_path, json_type_name, key_path
from specs.supervisor import SupervisorSpec

__all__ = ["EXAMPLES_DIR", "load_example", "load_supervisor_spec"]

EXAMPLES_DIR = Path(__file__).parent / "examples"
"""Directory of the example supervisor specs shipped with the package."""

_FLAT_SECTIONS = ("dataSchema", "ioConfig", "tuningConfig")


def load_supervisor_spec(data: Mapping[str, Any] | str | bytes) -> SupervisorSpec:
    """Validate a Kafka supervisor spec given as JSON text or as decoded JSON.

    Raises :class:`SpecError` listing every problem found, each named by its
    JSON path (``spec.ioConfig.taskCount``); ``"$"`` is the whole document.
    For the flat form (sections next to ``type``) paths carry no ``spec.``.
    """
    decoded: object = data
    if isinstance(data, str | bytes | bytearray):
        try:
            decoded = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SpecError.at("$", f"not valid JSON: {exc}") from None
        except RecursionError:
            decoded = None  # nested past what the decoder can hold: refused below for its depth
    if decoded is None or _deeper_than(decoded, MAX_JSON_DEPTH):
        raise SpecError.at("$", f"nests objects and arrays more than {MAX_JSON_DEPTH} levels deep "
                                "(a limit of this service)")
    if not isinstance(decoded, Mapping):
        raise SpecError.at("$", f"expected a JSON object, got {json_type_name(decoded)}")
    nul = _nul_paths(decoded)
    if nul:
        raise SpecError((path, "contains a NUL character (\\u0000), which a spec may not hold") for path in nul)
    flat = "spec" not in decoded and any(key in decoded for key in _FLAT_SECTIONS)
    try:
        return SupervisorSpec.model_validate(dict(decoded))
    except ValidationError as exc:
        raise spec_error_from_validation(exc, strip_prefix="spec" if flat else "") from None


def _deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests mappings and lists more than ``limit`` levels (iteratively: any depth is safe)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, Mapping | list):
            if depth > limit:
                return True
            todo.extend((child, depth + 1) for child in (item.values() if isinstance(item, Mapping) else item))
    return False


def _nul_paths(value: object, path: str = "") -> list[str]:
    """Paths of the strings (keys included) holding a NUL character: PostgreSQL cannot store one in JSON."""
    if isinstance(value, str):
        return [path or "$"] if "\x00" in value else []
    if isinstance(value, Mapping):
        return [p for key, item in value.items()
                for p in ([join_path(path, key_path(str(key)))] if "\x00" in str(key) else
                          _nul_paths(item, join_path(path, key_path(str(key)))))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _nul_paths(item, f"{path}[{index}]")]
    return []


def load_example(name: str) -> SupervisorSpec:
    """Load one of the bundled examples by file stem, e.g. ``load_example("wikipedia")``."""
    return load_supervisor_spec((EXAMPLES_DIR / f"{name}.json").read_bytes())


def spec_error_from_validation(exc: ValidationError, strip_prefix: str = "") -> SpecError:
    """Turn a pydantic error into a :class:`SpecError` with Druid-style paths.

    ``strip_prefix`` removes a leading path segment (used for the flat form).
    """
    errors: list[tuple[str, str]] = []
    for detail in exc.errors(include_url=False):
        path = loc_path(detail["loc"])
        if strip_prefix and (path == strip_prefix or path.startswith(strip_prefix + ".")):
            path = path[len(strip_prefix) + 1 :]
        for item in _describe(detail, path):
            if item not in errors:
                errors.append(item)
    return SpecError(errors)


_UNION_TAGS = frozenset({"schema_inline", "schema_registry", "file", "inline"})
"""The ``type`` values of the decoders (tagged unions), which pydantic puts in an error's location."""


def loc_path(loc: Sequence[int | str]) -> str:
    """Render a pydantic error location as a JSON path (``spec.ioConfig.topic``, ``metricsSpec[2]``)."""
    path = ""
    for part in loc:
        if part in _UNION_TAGS:
            continue
        path = join_path(path, f"[{part}]" if isinstance(part, int) else key_path(str(part)))
    return path


def _describe(detail: ErrorDetails, path: str) -> list[tuple[str, str]]:
    kind = detail["type"]
    ctx: dict[str, Any] = dict(detail.get("ctx") or {})
    value = detail["input"]
    got = json_type_name(value)
    if kind == "value_error":
        cause = ctx.get("error")
        if isinstance(cause, SpecError):
            return cause.prefixed(path).errors
        return [(path, str(cause))]
    messages = {
        "missing": "required field is missing",
        "model_type": f"expected an object, got {got}",
        "model_attributes_type": f"expected an object, got {got}",
        "dict_type": f"expected an object, got {got}",
        "tuple_type": f"expected a list, got {got}",
        "list_type": f"expected a list, got {got}",
        "int_type": f"expected an integer, got {got}",
        "bool_type": f"expected true or false, got {got}",
        "string_type": f"expected a string, got {got}",
        "string_too_short": "must not be empty",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {_show(value)}",
        "greater_than": f"must be > {ctx.get('gt')}, got {_show(value)}",
        "literal_error": f"expected {ctx.get('expected')}, got {_show(value)}",
    }
    return [(path or "$", messages.get(kind, detail["msg"]))]


def _show(value: object) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 80 else repr(value[:77]) + "..."
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
