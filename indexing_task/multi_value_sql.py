"""SQL for multi-value string dimensions: a JSON array's elements as a list, and the reasons a record is refused."""

from __future__ import annotations

from indexing_task.rollup_schema import Dimension
from indexing_task.sql_text import quote_string as _lit

__all__ = ["array_reason", "elements_sql", "multi_value_sql", "nested_reason"]


def nested_reason(field: str) -> str:
    """The parse's reason for a JSON array or object where typed schema discovery reads a field."""
    return (f"field {field} holds a JSON array or object: useSchemaDiscovery would make it an ARRAY or "
            "COMPLEX<json> column, which is not supported (list it as a string dimension for a multi-value one)")


def array_reason(dimension: str) -> str:
    """The parse's reason for a JSON array in a single-valued string dimension (:meth:`Rollup.parse` acts on it)."""
    return f"a JSON array for string dimension {dimension}"


def elements_sql(token: str, text: str) -> str:
    """SQL for a field's values as a list of text: a JSON array's elements, else its one value (``text``)."""
    return f"CASE WHEN left({token}, 1) = '[' THEN from_json({token}, '[\"VARCHAR\"]') ELSE [{text}] END"


def multi_value_sql(token: str, text: str, d: Dimension) -> tuple[str, str]:
    """A multi-value dimension's list of strings from its JSON ``token``, and the check for nested values.

    As Druid: each array element as text (a scalar, a one-element list), sorted with nulls first
    (``SORTED_ARRAY``), also without repeats (``SORTED_SET``), or as it came (``ARRAY``); an
    empty array, ``[null]`` and a missing field are all a null row.
    """
    values = elements_sql(token, text)
    if d.handling == "SORTED_ARRAY":
        values = f"list_sort({values}, 'ASC', 'NULLS FIRST')"
    elif d.handling == "SORTED_SET":  # list_distinct drops nulls; one is kept, as Druid keeps one
        values = (f"list_sort(list_distinct({values}) || CASE WHEN list_contains(list_transform({values}, "
                  f"lambda v: v IS NULL), true) THEN [NULL::VARCHAR] ELSE [] END, 'ASC', 'NULLS FIRST')")
    row = f"CASE WHEN {token} IS NULL OR len(__v) = 0 OR __v = [NULL::VARCHAR] THEN NULL ELSE __v END"
    nested = (f"WHEN left({token}, 1) = '[' AND list_bool_or(list_transform(from_json({token}, '[\"JSON\"]'), "
              f"lambda v: json_type(v) IN ('ARRAY', 'OBJECT'))) "
              f"THEN {_lit(f'a nested array or object in multi-value dimension {d.name}')}")
    return row.replace("__v", f"({values})"), nested
