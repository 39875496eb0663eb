"""The parse's first step: each record's value as JSON text (CSV and TSV lines made into JSON objects)."""

from __future__ import annotations

from indexing_task.rollup_schema import DelimitedValues
from indexing_task.sql_text import quote_string as _lit

__all__ = ["values_sql"]

_CSV_FIELD = '"(?:[^"]|"")*"|[^,"]*'
"""One CSV field: quoted (a quote doubled inside), or up to the next comma."""


def values_sql(carried: str, delimited: DelimitedValues | None, decoded: bool = False, typed: bool = False) -> str:
    """The ``src`` CTE: each record's value as JSON text ``__s``, and ``__problem``, why a value is unreadable.

    A CSV or TSV line becomes a JSON object of its columns' texts (empty ones null, as in Druid;
    one holding the ``listDelimiter``, a JSON array of its parts: a multi-value dimension), so the
    rest of the parse reads every format alike. ``decoded``: the batch holds values already
    decoded to JSON (Avro, Protobuf) and their ``__problem``; ``typed``: it holds them as typed rows ``__v``
    (and ``__problem``), not as JSON text.
    """
    if typed:
        return f"src AS (SELECT {carried}, __raw IS NULL AS __is_null, __problem, __v FROM batch)"
    if delimited is None:
        problem = "__problem" if decoded else "NULL::VARCHAR AS __problem"
        return f"src AS (SELECT {carried}, __raw IS NULL AS __is_null, {problem}, try(decode(__raw)) AS __s FROM batch)"
    if delimited.quoted:  # a line without quotes (the usual one) is only split, as TSV
        cells = (f"CASE WHEN contains(__line, '\"') THEN regexp_extract_all(',' || __line, "
                 f"{_lit(',(' + _CSV_FIELD + ')')}, 1) ELSE string_split(__line, ',') END")
        unquoted = "CASE WHEN starts_with(c, '\"') THEN replace(c[2:-2], '\"\"', '\"') ELSE c END"
        malformed = (f"WHEN contains(__line, '\"') AND NOT regexp_full_match(__line, "
                     f"{_lit(f'(?:{_CSV_FIELD})(?:,(?:{_CSV_FIELD}))*')}) "
                     "THEN 'not a line of comma-separated values (a quote inside a value must be doubled, and the "
                     "value quoted)'")
    else:
        cells = f"string_split(__line, {_lit(delimited.separator)})"
        unquoted, malformed = "c", ""
    pairs = ", ".join(f"{_lit(name)}, __cells[{i}]" for i, name in enumerate(delimited.columns, 1))
    split = _lit(delimited.list_delimiter)
    listed = ", ".join(f"{_lit(name)}, CASE WHEN contains(__cells[{i}], {split}) THEN to_json(list_transform("
                       f"string_split(__cells[{i}], {split}), lambda p: nullif(p, ''))) ELSE to_json(__cells[{i}]) END"
                       for i, name in enumerate(delimited.columns, 1))
    return f"""lines AS (SELECT {carried}, __raw IS NULL AS __is_null,
                             regexp_replace(try(decode(__raw)), '\\r?\\n$', '') AS __line FROM batch),
            cells AS (SELECT *, list_transform({cells}, lambda c: nullif({unquoted}, '')) AS __cells FROM lines),
            checked AS (SELECT *, CASE WHEN __line IS NULL THEN NULL
                                       WHEN regexp_matches(__line, '[\\r\\n]')
                                           THEN 'several lines in one value (Druid reads each as a row)'
                                       {malformed}
                                  END AS __problem FROM cells),
            src AS (SELECT {carried}, __is_null, __problem,
                           CASE WHEN __line IS NULL OR __problem IS NOT NULL THEN NULL
                                WHEN list_bool_or(list_transform(__cells, lambda c: contains(c, {split})))
                                    THEN json_object({listed})
                                ELSE json_object({pairs}) END AS __s
                    FROM checked)"""
