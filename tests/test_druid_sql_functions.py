"""Druid SQL functions Spark lacks or spells differently (STRING_FORMAT, PARSE_LONG, ICONTAINS_STRING,
POSITION ... FROM, ARRAY_LENGTH of an expression, MV_FILTER_REGEX/PREFIX), and Druid functions we lack
named in a 400. Expected values are Druid's documented behaviour or its quidem tests' answers (cited).
"""

from __future__ import annotations

from typing import Any

import pytest

from overlord.query.engine import run_sql
from overlord.query.query_errors import QueryError
from tests.test_druid_sql import one


@pytest.mark.parametrize("expression, expected", [
    # Java's String.format (quidem agg_funcs string_agg tests: '%s-%s' of two aggregates)
    ("STRING_FORMAT('%s-%s', 'a,b', 'a|b')", "a,b-a|b"),
    ("STRING_FORMAT('%d items at %.2f', 3, 1.5)", "3 items at 1.50"),
    ("STRING_FORMAT('%x', 255)", "ff"),
    ("STRING_FORMAT('%s', CAST(NULL AS VARCHAR))", "null"),
    ("STRING_FORMAT('%s', __time) FROM (SELECT TIMESTAMP '2020-01-01 01:01:01' AS __time)", "1577840461000"),
    # Long.parseLong in the radix; NULL for what does not parse (a hex 0x prefix is dropped)
    ("PARSE_LONG('1234')", 1234),
    ("PARSE_LONG('-1234', 8)", -668),
    ("PARSE_LONG('ff', 16)", 255),
    ("PARSE_LONG('0xFF', 16)", 255),
    ("PARSE_LONG('1111111111|1111111111', 16)", None),
    ("PARSE_LONG('12a')", None),
    ("PARSE_LONG(' 12')", None),
    ("PARSE_LONG('9223372036854775807')", 9223372036854775807),
    ("PARSE_LONG('9223372036854775808')", None),
    ("PARSE_LONG('zzzzzzzzzzzzzzzzzzzzzzzz', 36)", None),
    ("PARSE_LONG(CAST(NULL AS VARCHAR))", None),
    ("ICONTAINS_STRING('AAAA|AAAA', 'aaaa|')", True),
    ("ICONTAINS_STRING('AAAA|AAAA', 'BBBB|')", False),
    # the search starts at FROM's position (quidem agg_funcs string_agg A19: 22)
    ("POSITION('|1' IN '1111111111|1111111111|1111111111' FROM 12)", 22),
    ("POSITION('b' IN 'abc')", 2),
    ("POSITION('x' IN 'abc' FROM 2)", 0),
])
def test_druid_string_functions_mean_what_they_mean_in_druid(spark, engine, expression: str, expected: Any) -> None:
    assert one(spark, engine, expression) == expected


@pytest.mark.parametrize("query, expected", [
    # SqlQuidemTest mv_filter.iq: a list's matching values; one value as itself; NULL stays NULL
    ("SELECT MV_FILTER_REGEX(STRING_TO_MV('abc,def,abd', ','), '^ab')", '["abc","abd"]'),
    ("SELECT MV_FILTER_PREFIX(STRING_TO_MV('apple,banana,apricot', ','), 'ap')", '["apple","apricot"]'),
    ("SELECT MV_FILTER_PREFIX(STRING_TO_MV('a,b,c', ','), 'a')", "a"),
    ("SELECT MV_FILTER_PREFIX('apple', 'a')", "apple"),
    ("SELECT MV_FILTER_REGEX('apple', '^a.*')", "apple"),
    ("SELECT MV_FILTER_PREFIX(null, 'a')", None),
    ("SELECT MV_FILTER_REGEX(null, '^a.*')", None),
    ("SELECT MV_FILTER_PREFIX(STRING_TO_MV('a,b', ','), 'z')", None),
    ("SELECT ARRAY_LENGTH(ARRAY_CONCAT(ARRAY[1, 2], ARRAY[3]))", 3),
    ("SELECT ARRAY_LENGTH(CAST(NULL AS INTEGER ARRAY))", None),
])
def test_multi_value_filters_and_array_lengths_of_expressions(spark, engine, query: str, expected: Any) -> None:
    [[value]] = run_sql(spark, engine, query, "array")
    assert value == expected


@pytest.mark.parametrize("query, message", [
    ("SELECT STRING_FORMAT('%tY', CURRENT_TIMESTAMP)", "STRING_FORMAT: conversion '%t' is not supported"),
    ("SELECT PARSE_LONG('12', x) FROM (SELECT 10 AS x)", "PARSE_LONG: the radix must be an integer literal"),
    ("SELECT REGEXP_REPLACE_ALL_DRUID('a')", "function regexp_replace_all_druid() does not exist"),
    ("SELECT IPV4_MATCH('10.0.0.1', '10.0.0.0/8')", "IPV4_MATCH is a Druid function this overlord does not support"),
])
def test_what_is_not_supported_is_a_400_naming_the_druid_function(spark, engine, query: str, message: str) -> None:
    with pytest.raises(QueryError) as refused:
        run_sql(spark, engine, query)
    assert message in refused.value.message


def test_array_length_of_array_agg_is_answered_or_refused_naming_array_agg(spark, engine) -> None:
    try:
        assert run_sql(spark, engine, "SELECT ARRAY_LENGTH(ARRAY_AGG(id)) FROM range(3)", "array") == [[3]]
    except QueryError as refused:  # refused: named as written, not as collect_list, Spark's name for it
        assert "ARRAY_AGG" in refused.message and "collect_list" not in refused.message, refused.message
