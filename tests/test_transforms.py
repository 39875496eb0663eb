"""Druid expressions as the bulk parse pass computes them: each checked against the value Druid's rules give."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pytest

from indexing_task.transforms import compile_expression, create_macros
from specs import SpecError
from specs.expressions import parse_expression

RECORD = {"a": "x", "n": 5, "m": 2, "d": 1.5, "s5": "5", "name": "Alice", "dt": "2024-03-01 10:20:30",
          "nul": None, "zero": 0}
EVENT_MILLIS = 1709288430123  # 2024-03-01T10:20:30.123Z

CASES: list[tuple[str, Any]] = [
    ("n + m", 7), ("n - m * 2", 1), ("n / m", 2), ("-7 / 2", -3), ("n / zero", None), ("d * 2", 3.0),
    ("n % m", 1), ("n ^ 2", 25), ("2.0 ^ 3", 8.0), ("-n", -5), ("abs(-d)", 1.5),
    ("s5 + 1", 6.0), ("a + name", "xAlice"), ("'a' + 1", None),  # + concatenates two strings only
    ("s5 > 4", 1), ("a > 1", None),  # a string and a number compare as numbers
    ("s5 * 2", 10.0), ("timestamp_format(1e18)", None), ("abs(-9223372036854775807 - 1)", None),
    ("nul + 1", None), ("missing + 1", None),
    ("concat(a, '-', n)", "x-5"), ("concat(a, nul)", None), ("upper(name)", "ALICE"), ("lower(name)", "alice"),
    ("strlen(name)", 5), ("substring(name, 1, 3)", "lic"), ("substring(name, 2, -1)", "ice"),
    ("substring(name, 9, 1)", None), ("replace(name, 'l', 'L')", "ALice"), ("trim('  x ')", "x"),
    ("nvl(nul, 'none')", "none"), ("nvl(a, 'none')", "x"), ("isnull(nul)", 1), ("notnull(a)", 1),
    ("if(n > 3, 'big', 'small')", "big"), ("if(nul, 1, 2)", 2), ("n == 5 && a == 'x'", 1), ("!(n > 3)", 0),
    ("(n < 3) || (a != 'x')", 0), ("n != 5", 0), ("a < 'y'", 1), ("nul == 1", None), ("s5 == 5", 1),
    ("case_searched(n > 10, 'a', n > 4, 'b', 'c')", "b"), ("case_searched(n > 10, 'a')", None),
    ("case_simple(a, 'x', 1, 'y', 2, 3)", 1), ("case_simple(a, 'q', 1, 3)", 3),
    ("like(name, 'Al%')", 1), ("regexp_extract(name, 'l(i)', 1)", "i"), ("regexp_extract(name, 'l.')", "li"),
    ("regexp_extract(name, 'zz')", None), ("cast(d, 'LONG')", 1), ("cast(n, 'DOUBLE')", 5.0),
    ("cast(n, 'STRING')", "5"), ("timestamp_parse(dt)", 1709288430000),
    ("timestamp_parse(dt, 'yyyy-MM-dd HH:mm:ss')", 1709288430000), ("timestamp_parse('not a time')", None),
    ("timestamp_floor(__time, 'PT1H')", 1709287200000), ("timestamp_floor(__time, 'P1D')", 1709251200000),
    ("timestamp_format(__time)", "2024-03-01T10:20:30.123Z"), ('"a"', "x"), ("'it\\'s'", "it's"),
]


@pytest.fixture(scope="module")
def database() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_macros(con)
    con.execute("SET TimeZone = 'UTC'")
    return con


def evaluate(database: duckdb.DuckDBPyConnection, text: str) -> Any:
    def field(name: str) -> str:
        return f"nullif(json_extract(rec, '$.\"{name}\"')::VARCHAR, 'null')"
    sql = compile_expression(parse_expression(text), field, str(EVENT_MILLIS))
    token = database.execute(f"SELECT {sql} FROM (SELECT ?::VARCHAR AS rec)", [json.dumps(RECORD)]).fetchone()
    assert token is not None
    return None if token[0] is None else json.loads(token[0])


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_an_expression_has_the_value_and_type_druid_gives(database: duckdb.DuckDBPyConnection, text: str,
                                                          expected: Any) -> None:
    value = evaluate(database, text)
    assert value == expected and type(value) is type(expected), (text, value)


@pytest.mark.parametrize(("text", "fragment"), [
    ("foo(a)", "function foo is not supported"), ("a +", "unexpected end"), ("a || b && c", "parentheses"),
    ("concat()", "at least 1"), ("timestamp_floor(__time, 'P1X')", "ISO-8601"),
    ("timestamp_parse(d, 'dd MMM yyyy')", "'M'"), ("substring(a, n, 1)", "integer literal"),
    ("regexp_extract(a, '(')", "regular expression"),
    ("cast(a, 'FLOAT')", "FLOAT"), ("array(1, 2)", "array is not supported"), ("a[0]", "unexpected '[0]'"),
])
def test_an_expression_outside_the_subset_is_refused_naming_what(text: str, fragment: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_expression(text)
    assert fragment in str(refused.value), str(refused.value)
