"""Druid SQL on our engine: Druid's functions with Druid's semantics (checked against values worked
out by hand from Druid's documented behaviour), the ``druid.`` schema, INFORMATION_SCHEMA and
``sys`` tables, and SQLAlchemy's ``druid://`` dialect (pydruid, as Superset uses it) against a
live overlord.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pyarrow as pa
import pytest
import sqlalchemy as sa

from overlord.http.app import create_app
from overlord.query.druid_sql import translate
from overlord.query.engine import SqlQuery, run_sql
from overlord.query.query_errors import QueryError
from overlord.supervisor.metadata_store import MetadataStore
from tests.helpers import served, spec_json, start_overlord
from tests.test_timeline import HOUR, T0, fake_compact, publish_random

TS = "TIMESTAMP '2026-11-04 13:47:12'"  # a Wednesday
AT = datetime(2026, 11, 4, 13, 47, 12, tzinfo=UTC)


def one(spark, engine, expression: str) -> Any:
    [[value]] = run_sql(spark, engine, f"SELECT {expression}", "array")
    return value


@pytest.mark.parametrize("expression, expected", [
    (f"TIME_FLOOR({TS}, 'PT15M')", "2026-11-04T13:45:00.000Z"),
    (f"TIME_FLOOR({TS}, 'PT1H')", "2026-11-04T13:00:00.000Z"),
    (f"TIME_FLOOR({TS}, 'PT7M')", "2026-11-04T13:44:00.000Z"),  # 4,270,952 whole 7-minute periods since the epoch
    (f"TIME_FLOOR({TS}, 'P1D')", "2026-11-04T00:00:00.000Z"),
    (f"TIME_FLOOR({TS}, 'P1W')", "2026-11-02T00:00:00.000Z"),  # weeks start on Monday
    (f"TIME_FLOOR({TS}, 'P2W')", "2026-10-22T00:00:00.000Z"),  # whole fortnights since Thursday 1970-01-01
    (f"TIME_FLOOR({TS}, 'P1M')", "2026-11-01T00:00:00.000Z"),
    (f"TIME_FLOOR({TS}, 'P3M')", "2026-10-01T00:00:00.000Z"),
    (f"TIME_FLOOR({TS}, 'P5M')", "2026-09-01T00:00:00.000Z"),  # 682 months since 1970 -> 680
    (f"TIME_FLOOR({TS}, 'P1Y')", "2026-01-01T00:00:00.000Z"),
    (f"TIME_FLOOR({TS}, 'P5Y')", "2025-01-01T00:00:00.000Z"),
    (f"TIME_FLOOR(CAST({TS} AS TIMESTAMP), 'PT1H', NULL, 'Etc/UTC')", "2026-11-04T13:00:00.000Z"),
    (f"TIME_CEIL({TS}, 'PT15M')", "2026-11-04T14:00:00.000Z"),
    ("TIME_CEIL(TIMESTAMP '2026-11-04 13:45:00', 'PT15M')", "2026-11-04T13:45:00.000Z"),
    (f"TIME_SHIFT({TS}, 'P1D', -2)", "2026-11-02T13:47:12.000Z"),
    (f"TIME_SHIFT({TS}, 'P1M', 3)", "2027-02-04T13:47:12.000Z"),
    (f"FLOOR({TS} TO HOUR)", "2026-11-04T13:00:00.000Z"),
    (f"CEIL({TS} TO DAY)", "2026-11-05T00:00:00.000Z"),
    (f"TIMESTAMPADD(HOUR, 2, {TS})", "2026-11-04T15:47:12.000Z"),
    (f"TIMESTAMPDIFF(DAY, {TS}, TIMESTAMP '2026-11-07 13:47:12')", 3),
    (f"TIME_EXTRACT({TS}, 'DOW')", 3),
    (f"TIME_EXTRACT({TS}, 'HOUR')", 13),
    (f"TIME_EXTRACT({TS}, 'EPOCH')", int(AT.timestamp())),
    ("TIME_PARSE('2026-11-04T13:47:12Z')", "2026-11-04T13:47:12.000Z"),
    ("TIME_PARSE('not a time')", None),
    ("TIME_PARSE('04/11/2026', 'dd/MM/yyyy')", "2026-11-04T00:00:00.000Z"),
    (f"TIME_FORMAT({TS})", "2026-11-04T13:47:12.000Z"),
    # an interval's start may be a year or a month (CalciteQueryTest#testTimeFilterOnSubquery: '2000/P1D')
    ("TIME_IN_INTERVAL(TIMESTAMP '2001-01-01 12:00:00', '2001/P1D')", True),
    ("TIME_IN_INTERVAL(TIMESTAMP '2001-01-02 00:00:00', '2001/P1D')", False),
    ("TIME_IN_INTERVAL(TIMESTAMP '2001-02-15 00:00:00', '2001-02/P1M')", True),
    ("TIME_IN_INTERVAL(TIMESTAMP '2001-01-01 00:00:00', '2000-12-31T23:00/2001-01-01T01:00')", True),
    (f"TIME_FORMAT({TS}, 'yyyy-MM-dd HH')", "2026-11-04 13"),
    ("MILLIS_TO_TIMESTAMP(86400000)", "1970-01-02T00:00:00.000Z"),
    (f"TIMESTAMP_TO_MILLIS({TS})", int(AT.timestamp()) * 1000),
    ("REGEXP_EXTRACT('abc123', '[0-9]+')", "123"),  # Druid's default group 0; Spark's 1 would fail
    ("REGEXP_EXTRACT('abc123', '([a-z]+)([0-9]+)', 2)", "123"),
    ("STRLEN('abc')", 3),
    ("TEXTCAT('a', 'b')", "ab"),
    ("CONTAINS_STRING('abc', 'b')", True),
    ("STRPOS('abc', 'c')", 3),
    ("NVL(NULL, 'x')", "x"),
    # zero divisors: whole numbers have no answer, 0.0 / 0.0 is 0.0 (CalciteSelectQueryTest#testSafeDivideExpressions)
    ("SAFE_DIVIDE(0, 0)", None),
    ("SAFE_DIVIDE(7, 0)", None),
    ("SAFE_DIVIDE(CAST(0 AS BIGINT), CAST(0 AS BIGINT))", None),
    ("SAFE_DIVIDE(7, 2)", 3),
    ("SAFE_DIVIDE(0.0, 0.0)", 0.0),
    ("SAFE_DIVIDE(1.5, 0.0)", None),
    ("SAFE_DIVIDE(CAST(0 AS DOUBLE), 0)", 0.0),
    ("SAFE_DIVIDE(l, z) FROM (SELECT CAST(0 AS BIGINT) AS l, CAST(0 AS BIGINT) AS z)", None),  # columns' types
    ("SAFE_DIVIDE(f, z) FROM (SELECT CAST(0 AS FLOAT) AS f, CAST(0 AS BIGINT) AS z)", 0.0),
    # scale arguments: the digits asked for are kept, cut toward zero
    ("TRUNCATE(5 / 4.0, 1)", 1.2),
    ("TRUNCATE(CAST(5 AS FLOAT) / 4.0, 1)", 1.2),
    ("TRUNCATE(-1.25, 1)", -1.2),
    ("TRUNCATE(1.99)", 1.0),
    ("TRUNCATE(0.3, 1)", 0.3),  # the double's decimal digits, as Java's BigDecimal.valueOf reads it
    ("TRUNC(2.567, 2)", 2.56),
    ("TRUNCATE(125, -1)", 120),
    ("TRUNCATE(CAST(NULL AS DOUBLE), 1)", None),
    ("ROUND(1.25, 1)", 1.3),
    ("ROUND(125, -1)", 130),
    # string functions over '' give '', as Druid's do (SUBSTRING past the end is NULL: Druid's own rule)
    ("UPPER('')", ""),
    ("LEFT('', 1)", ""),
    ("RIGHT('', 1)", ""),
    ("REVERSE('')", ""),
    ("REPLACE('', 'a', 'b')", ""),
    ("TRIM('')", ""),
    ("CONCAT('', 'a')", "a"),
    ("LPAD('', 2, 'x')", "xx"),
    ("STRLEN('')", 0),
])
def test_druid_functions_mean_what_they_mean_in_druid(spark, engine, expression, expected):
    assert one(spark, engine, expression) == expected


@pytest.mark.parametrize("query, message", [
    (f"SELECT TIME_FLOOR({TS}, 'PT1H30M')", "TIME_FLOOR: period 'PT1H30M' is not supported"),
    (f"SELECT TIME_FLOOR({TS}, 'PT1H', NULL, 'America/New_York')", "time zone 'America/New_York' is not supported"),
    (f"SELECT TIME_FLOOR({TS}, 'PT1H', TIMESTAMP '2020-01-01 00:00:00')", "the origin must be a string"),
    (f"SELECT TIME_EXTRACT({TS}, 'FORTNIGHT')", "TIME_EXTRACT: unit 'FORTNIGHT' is not supported"),
    ("SELECT * FROM INFORMATION_SCHEMA.VIEWS", "INFORMATION_SCHEMA.VIEWS: no such table"),
    (f"SELECT TIME_SHIFT({TS}, 'PT1H')", "TIME_SHIFT takes 3 to 4 arguments, got 2"),
    ("SELECT STRLEN('a', 'b')", "STRLEN takes 1 argument, got 2"),
    ("SELECT APPROX_COUNT_DISTINCT_DS_HLL(id, 30) FROM range(3)", "the lgK must be an integer literal from 4 to 21"),
    ("SELECT APPROX_COUNT_DISTINCT_DS_THETA(id, 1000) FROM range(3)", "the size must be a power of 2"),
    ("SELECT APPROX_QUANTILE_DS(id, 1.5) FROM range(3)", "the probability must be a number literal from 0 to 1"),
])
def test_what_is_not_supported_is_a_400_naming_it(spark, engine, query, message):
    with pytest.raises(QueryError, match="") as refused:
        run_sql(spark, engine, query)
    assert message in refused.value.message


@pytest.mark.parametrize("expression, exact, error", [
    ("APPROX_COUNT_DISTINCT_DS_HLL(id % 50000)", 50_000, 1.04 / 2**6),  # lgK 12
    ("APPROX_COUNT_DISTINCT_DS_HLL(CAST(id AS STRING), 16, 'HLL_8')", 200_000, 1.04 / 2**8),
    ("APPROX_COUNT_DISTINCT_DS_THETA(id % 70000)", 70_000, 1 / 2**7),  # size 16384
    ("APPROX_COUNT_DISTINCT_DS_THETA(id, 1024)", 200_000, 1 / 2**5),
])
def test_sketch_distinct_counts_are_within_the_sketches_documented_error(spark, engine, expression, exact, error):
    estimate = one(spark, engine, f"{expression} FROM range(200000)")
    assert abs(estimate - exact) <= 3 * error * exact, (estimate, exact)


def test_sketch_quantiles_are_within_the_sketches_rank_error(spark, engine):
    median, p90 = run_sql(spark, engine, "SELECT APPROX_QUANTILE_DS(id, 0.5) AS m, APPROX_QUANTILE_DS(id, 0.9, 256) "
                                         "AS p FROM range(100001)", "array")[0]
    assert abs(median - 50_000) <= 0.017 * 100_000 and abs(p90 - 90_000) <= 0.017 * 100_000


def test_a_time_zone_other_than_utc_is_refused_not_ignored(spark, engine):
    query = SqlQuery.model_validate({"query": "SELECT 1 AS x", "context": {"sqlTimeZone": "Europe/Paris"}})
    with pytest.raises(QueryError, match="sqlTimeZone: 'Europe/Paris' is not supported"):
        query.run(spark, engine)
    assert SqlQuery.model_validate({"query": "SELECT 1 AS x", "context": {"sqlTimeZone": "Etc/UTC"}}).run(
        spark, engine) == [{"x": 1}]


def test_a_druid_function_we_lack_is_named_in_the_error(spark, engine):
    with pytest.raises(QueryError) as refused:
        run_sql(spark, engine, "SELECT DS_TUPLE_DOUBLES('x')")
    assert refused.value.message == "DS_TUPLE_DOUBLES is a Druid function this overlord does not support"
    assert refused.value.error_class == "UNSUPPORTED_DRUID_SQL"
    with pytest.raises(QueryError) as unknown:
        run_sql(spark, engine, "SELECT NO_SUCH_FUNCTION('x')")
    assert "function no_such_function() does not exist" in unknown.value.message
    rows = "(VALUES ('a', 7), ('a', CAST(NULL AS BIGINT)), ('b', 6)) AS t(k, v)"
    assert run_sql(spark, engine, f"SELECT k, BIT_OR(v), BIT_XOR(v) FROM {rows} GROUP BY k ORDER BY k", "array") == [
        ["a", 7, 7], ["b", 6, 6]]
    with pytest.raises(QueryError) as defect:  # Druid answers 0 for both groups: a true AND (7, 6) would differ
        run_sql(spark, engine, f"SELECT k, BIT_AND(v) FROM {rows} GROUP BY k")
    assert defect.value.message.startswith("BIT_AND is refused: Druid's starts from 0")


def test_a_null_test_of_what_druid_types_not_null_is_refused(spark, engine):
    """Druid types ARRAY_ORDINAL_OF and ARRAY_SLICE NOT NULL and answers ``IS NULL`` over them false.

    Even for a NULL (its quidem files count 0 rows where ARRAY_OFFSET_OF's NULL counts 1): refused, not answered
    otherwise.
    """
    rows = "(VALUES (CAST(NULL AS DOUBLE))) AS t(v)"
    for call in ("ARRAY_ORDINAL_OF(ARRAY_AGG(v), 1.5)", "ARRAY_SLICE(ARRAY_AGG(v), 0, 1)"):
        for query in (f"SELECT COUNT(*) FROM (SELECT {call} AS col FROM {rows}) WHERE col IS NULL",
                      f"SELECT {call} IS NOT NULL FROM {rows}"):
            with pytest.raises(QueryError) as defect:
                run_sql(spark, engine, query)
            assert defect.value.error_class == "UNSUPPORTED_DRUID_SQL"
            assert defect.value.message.startswith(f"IS NULL over {call.split('(')[0]} is refused")
    assert run_sql(spark, engine, f"SELECT COUNT(*) FROM (SELECT ARRAY_OFFSET_OF(ARRAY_AGG(v), 1.5) AS col "
                                  f"FROM {rows}) WHERE col IS NULL", "array") == [[1]]
    assert run_sql(spark, engine, f"SELECT ARRAY_SLICE(ARRAY_AGG(v), 0, 1) AS col FROM {rows}", "array") == [[[None]]]


def test_grouping_of_several_columns_in_any_order_and_windows_that_need_an_order(spark, engine):
    rows = "VALUES ('a', 1), ('b', 2) AS t(k, v)"
    got = run_sql(spark, engine, f"SELECT k, v, GROUPING(v, k) AS g FROM {rows} "
                                 "GROUP BY GROUPING SETS ((k, v), (k), ()) ORDER BY g, k NULLS LAST", "array")
    assert got == [["a", 1, 0], ["b", 2, 0], ["a", None, 2], ["b", None, 2], [None, None, 3]]
    with pytest.raises(QueryError) as refused:
        run_sql(spark, engine, f"SELECT LAG(v) OVER () FROM {rows}")
    assert refused.value.error_class == "UNSUPPORTED_DRUID_SQL" and "add ORDER BY" in refused.value.message
    subtotals = f"SELECT k, v, COUNT(*) AS n FROM {rows} GROUP BY GROUPING SETS ((k, v), (k)) ORDER BY v, k"
    assert run_sql(spark, engine, subtotals, "array") == [["a", None, 1], ["b", None, 1], ["a", 1, 1], ["b", 2, 1]]
    with pytest.raises(QueryError) as split:  # with a LIMIT, Druid gives k's subtotals once per v
        run_sql(spark, engine, f"{subtotals} LIMIT 10")
    assert split.value.message.startswith("GROUPING SETS ordered by v with a LIMIT: Druid answers this shape with")


def test_constants_through_infinity_are_refused_or_clamped_as_druids_planner_does(spark, engine):
    """Druid folds constants: one that ends as Infinity/NaN is an error, a BIGINT cast of one is clamped."""
    long_max, long_min = 2 ** 63 - 1, -(2 ** 63)
    got = run_sql(spark, engine, "SELECT CAST(1 / 0.0 AS BIGINT), CAST(-1 / -0.0 AS BIGINT), CAST(0 / 0.0 AS BIGINT), "
                                 "CAST(-1 / 0.0 AS BIGINT) + 1, LOG10(100), 7 / 2, CAST(1 / 0.0 AS BIGINT) + 1, "
                                 "CAST(1 / 0.0 AS BIGINT) * 2, CAST(POWER(0, -1) AS BIGINT), "
                                 "CAST(POWER(-10, 401) AS BIGINT)", "array")
    assert got == [[long_max, long_min, 0, long_min + 1, 2.0, 3, long_min, -2, long_max, long_min]]  # Java's longs
    product = "*".join(["CAST(1 / 0.0 AS BIGINT)"] * 227)
    assert run_sql(spark, engine, f"SELECT {product}", "array") == [[long_max]]  # an odd power of Long.MAX wraps to it
    with pytest.raises(QueryError, match="NUMERIC_VALUE_OUT_OF_RANGE"):  # Spark's 400, not a 500
        run_sql(spark, engine, f"SELECT {'*'.join(['9999999999999999999'] * 17)} * 1.0")
    for query, word in (("SELECT LOG10(0)", "-Infinity"), ("SELECT x FROM (VALUES (1)) AS t(x) WHERE x > LN(0) - LN(0)",
                                                            "NaN"), ("SELECT POWER(10.0, 400)", "Infinity"),
                        ("SELECT POWER(0, -1)", "Infinity"), ("SELECT POWER(1, 1 / 0.0)", "NaN")):
        with pytest.raises(QueryError) as refused:
            run_sql(spark, engine, query)
        assert refused.value.error_class == "UNSUPPORTED_DRUID_SQL"
        assert refused.value.message.endswith(f"evaluates to an unsupported value [{word}], expected something "
                                              "that can be a Double")
    with pytest.raises(QueryError, match="DECIMAL_PRECISION_EXCEEDS_MAX_PRECISION"):  # Spark's 400, not a 500
        run_sql(spark, engine, f"SELECT {'9' * 5000} * 0.0")  # (past Python's int parsing limit)


def test_a_sketch_is_read_through_its_estimate_and_never_returned(spark, engine):
    """DS_HLL/DS_THETA count as DataSketches do (no null, no ''); a sketch's bytes are not Druid's, so not given."""
    rows = "VALUES ('a'), ('b'), (''), (NULL), ('a') AS t(x)"
    got = run_sql(spark, engine, f"SELECT HLL_SKETCH_ESTIMATE(DS_HLL(x)), THETA_SKETCH_ESTIMATE(DS_THETA(x)), "
                                 f"THETA_SKETCH_ESTIMATE(THETA_SKETCH_NOT(DS_THETA(x), DS_THETA(x) FILTER "
                                 f"(WHERE x = 'a'))) FROM {rows}", "array")
    assert got == [[2, 2.0, 1.0]]
    with pytest.raises(QueryError) as refused:
        run_sql(spark, engine, f"SELECT DS_HLL(x) FROM {rows}")
    assert refused.value.message.startswith("DS_HLL: a sketch is only read through HLL_SKETCH_ESTIMATE")


def test_plain_spark_sql_is_passed_on_as_written():
    query = "SELECT country, COUNT(*) AS n FROM events WHERE country = ? GROUP BY country"
    assert translate(query).sql == query
    assert translate("SELECT 1 FROM (").sql == "SELECT 1 FROM ("  # Spark reports the syntax error


NAME = f"ds-{uuid.uuid4().hex[:8]}"


def publish_three_hours(engine: sa.Engine, root: str) -> tuple[str, pa.Table]:
    """Datasource NAME (named like Druid's, with a '-'): three hours of random rows, the same every time."""
    rng = random.Random(17)
    tables = [publish_random(engine, root, NAME, rng, T0 + hour * HOUR, 60) for hour in range(3)]
    return NAME, pa.concat_tables(tables)


@pytest.fixture(scope="module")
def datasource(engine, tmp_path_factory) -> tuple[str, pa.Table]:
    return publish_three_hours(engine, str(tmp_path_factory.mktemp("deep")))


def test_time_grains_latest_and_the_druid_schema_over_a_datasource(spark, engine, datasource):
    name, table = datasource
    rows = table.to_pylist()
    per_hour = run_sql(spark, engine, f'SELECT TIME_FLOOR(__time, \'PT1H\') AS h, SUM("count") AS n '
                       f'FROM druid."{name}" GROUP BY 1 ORDER BY 1', "array")
    expected: Counter[datetime] = Counter()
    for row in rows:
        expected[row["__time"].replace(minute=0)] += row["count"]
    assert per_hour == [[f"{h:%Y-%m-%dT%H:%M:%S}.000Z", n] for h, n in sorted(expected.items())]
    latest = max(rows, key=lambda r: (r["__time"], r["country"]))["__time"]
    [[last, first]] = run_sql(spark, engine, f'SELECT MAX(__time), TIME_FORMAT(EARLIEST(__time)) '
                              f'FROM "druid"."{name}"', "array")
    earliest = min(r["__time"] for r in rows)
    assert (last, first) == (f"{latest:%Y-%m-%dT%H:%M:%S}.000Z", f"{earliest:%Y-%m-%dT%H:%M:%S}.000Z")


def test_any_value_is_the_earliest_rows_as_druid_meets_rows_in_time_order(spark, engine, datasource):
    name, table = datasource
    rows = table.to_pylist()
    start = min(r["__time"] for r in rows)
    [[country, device]] = run_sql(spark, engine, f'SELECT ANY_VALUE(country), ANY_VALUE(device, 2) FROM "{name}"',
                                  "array")
    assert country in {r["country"] for r in rows if r["__time"] == start}
    assert device in {r["device"][:2] for r in rows if r["__time"] == start}
    grouped = run_sql(spark, engine, f'SELECT country, ANY_VALUE(device) FROM "{name}" GROUP BY 1', "array")
    for country, device in grouped:
        theirs = [r for r in rows if r["country"] == country]
        assert device in {r["device"] for r in theirs if r["__time"] == min(t["__time"] for t in theirs)}


def test_a_text_column_compared_with_a_number_is_read_as_a_number(spark, engine, datasource):
    """As in Druid: text that is no number matches nothing (Spark's ANSI cast would fail the query)."""
    name, table = datasource
    got = run_sql(spark, engine, f'SELECT COUNT(*), SUM(country), COUNT(*) FILTER (WHERE device > 1) '
                                 f'FROM "{name}" WHERE country <> 0 OR "count" > 0', "array")
    assert got == [[table.num_rows, None, 0]]


def test_a_star_over_a_self_join_names_the_right_sides_columns_as_calcite_does(spark, engine, datasource):
    """Calcite makes a join's ``*`` unique (the right side's ``country`` is ``country0``): the left's is meant.

    As in Druid's ``CalciteJoinQueryTest#testJoinOuterGroupByAndSubqueryNoLimit``.
    """
    name, table = datasource
    rows = table.to_pylist()
    got = run_sql(spark, engine, f'SELECT country, SUM("count"), COUNT(country0) FROM (SELECT * FROM "{name}" AS t1 '
                                 f'INNER JOIN "{name}" AS t2 ON t1.__time = t2.__time AND t1.country = t2.country '
                                 f'AND t1.device = t2.device) AS t3 GROUP BY country ORDER BY country', "array")
    expected: Counter[str] = Counter()
    for row in rows:
        expected[row["country"]] += row["count"]
    assert got == [[country, n, sum(r["country"] == country for r in rows)] for country, n in sorted(expected.items())]


def test_text_that_is_no_number_is_in_no_numbers_of_a_subquery(spark, engine, datasource):
    """As in Druid's ``CalciteJoinQueryTest#testRegressionFilteredAggregatorsSubqueryJoins``: 'A' NOT IN numbers."""
    name, table = datasource
    counts = f'(SELECT "count" FROM "{name}")'
    got = run_sql(spark, engine, f"SELECT COUNT(*) FILTER (WHERE 'A' NOT IN {counts}), "
                                 f"COUNT(*) FILTER (WHERE 'A' IN {counts}), COUNT(*) FILTER (WHERE '1' IN {counts}) "
                                 f'FROM "{name}"', "array")
    assert 1 in table.column("count").to_pylist()
    assert got == [[table.num_rows, 0, table.num_rows]]


def test_information_schema_and_sys_tables(spark, engine, datasource, tmp_path):
    name, table = datasource
    # Found in CI: another datasource compacted to version 2 over the same hour made ours look overshadowed.
    other = f"other-{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        publish_random(engine, str(tmp_path), other, random.Random(5), T0, 10)
    assert fake_compact(engine, str(tmp_path), other, T0).ok
    tables = run_sql(spark, engine, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES")
    assert {"TABLE_SCHEMA": "druid", "TABLE_NAME": name, "TABLE_TYPE": "TABLE"} in tables
    assert {"TABLE_SCHEMA": "INFORMATION_SCHEMA", "TABLE_NAME": "COLUMNS", "TABLE_TYPE": "SYSTEM_TABLE"} in tables
    columns = run_sql(spark, engine, "SELECT COLUMN_NAME, DATA_TYPE, JDBC_TYPE, IS_NULLABLE FROM "
                      f"INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = '{name}' ORDER BY ORDINAL_POSITION", "array")
    assert columns[0] == ["__time", "TIMESTAMP", 93, "NO"]
    assert {c[0]: (c[1], c[2]) for c in columns[1:]} == {
        "country": ("VARCHAR", 12), "device": ("VARCHAR", 12), "count": ("BIGINT", -5), "value_sum": ("BIGINT", -5),
        "value_min": ("BIGINT", -5), "value_max": ("BIGINT", -5), "price_sum": ("DOUBLE", 8)}
    routines = run_sql(spark, engine, "SELECT ROUTINE_NAME, IS_AGGREGATOR FROM INFORMATION_SCHEMA.ROUTINES WHERE "
                       "ROUTINE_NAME IN ('TIME_FLOOR', 'EARLIEST', 'MV_CONTAINS', 'DS_HLL', 'CEIL') ORDER BY 1",
                       "array")
    assert routines == [["CEIL", "NO"], ["DS_HLL", "YES"], ["EARLIEST", "YES"], ["MV_CONTAINS", "NO"],
                        ["TIME_FLOOR", "NO"]]
    schemas = run_sql(spark, engine, "SELECT SCHEMA_NAME FROM INFORMATION_SCHEMA.SCHEMATA ORDER BY 1", "array")
    assert schemas == [["INFORMATION_SCHEMA"], ["druid"], ["sys"]]
    [[segments, rows, overshadowed]] = run_sql(
        spark, engine, f"SELECT COUNT(*), SUM(num_rows), SUM(is_overshadowed) FROM sys.segments "
        f"WHERE datasource = '{name}' AND is_published = 1", "array")
    assert (segments, rows, overshadowed) == (3, table.num_rows, 0)


@pytest.fixture(scope="module")
def live_sql(stack, engine, spark, tmp_path_factory) -> Iterator[str]:
    """An overlord's HTTP API on a database of its own that holds the same datasource."""
    root = str(tmp_path_factory.mktemp("deep"))
    overlord = start_overlord(stack, engine, spark, root)
    publish_three_hours(overlord.engine, root)
    try:
        with served(create_app(overlord, authenticator=None)) as url:
            yield url
    finally:
        overlord.stop(grace_s=10)
        overlord.engine.dispose()


def test_sqlalchemy_druid_dialect_inspects_and_runs_superset_style_queries(live_sql, datasource):
    name, table = datasource
    host_port = live_sql.removeprefix("http://")
    druid = sa.create_engine(f"druid://{host_port}/druid/v2/sql/")
    inspector = sa.inspect(druid)
    assert name in inspector.get_table_names(schema="druid")
    with druid.connect() as conn:
        assert druid.dialect.has_table(conn, name)  # as pydruid defines it (SQLAlchemy 2's inspector passes more)
    columns = {c["name"]: c for c in inspector.get_columns(name, schema="druid")}
    assert isinstance(columns["__time"]["type"], sa.TIMESTAMP) and not columns["__time"]["nullable"]
    assert isinstance(columns["count"]["type"], sa.BigInteger) and isinstance(columns["country"]["type"], sa.String)

    # What Superset's Druid engine spec sends for an hourly time-grain chart over a time range.
    start, end = T0 + HOUR, T0 + 3 * HOUR
    query = (f'SELECT TIME_FLOOR(CAST(__time AS TIMESTAMP), \'PT1H\') AS __timestamp, SUM("count") AS "events" '
             f'FROM druid."{name}" WHERE __time >= TIME_PARSE(\'{start:%Y-%m-%dT%H:%M:%S}\') '
             f'AND __time < TIME_PARSE(\'{end:%Y-%m-%dT%H:%M:%S}\') GROUP BY TIME_FLOOR(CAST(__time AS TIMESTAMP), '
             "'PT1H') ORDER BY \"events\" DESC LIMIT 10000")
    with druid.connect() as conn:
        got = {str(r[0]): r[1] for r in conn.execute(sa.text(query))}
    expected: Counter[str] = Counter()
    for row in table.to_pylist():
        if start <= row["__time"] < end:
            expected[f"{row['__time'].replace(minute=0):%Y-%m-%dT%H:%M:%S}.000Z"] += row["count"]
    assert got == dict(expected) and len(got) == 2
    assert timedelta(hours=2) == end - start


# --- native queries through pydruid's native client -------------------------------------------------

INTERVAL = f"{T0:%Y-%m-%dT%H:%M:%S}Z/{T0 + 4 * HOUR:%Y-%m-%dT%H:%M:%S}Z"


def _hour(ts: datetime) -> str:
    return f"{ts.replace(minute=0):%Y-%m-%dT%H:%M:%S}.000Z"


def test_sys_servers_lists_the_leading_overlord_and_columns_count_from_zero(live_sql, datasource):
    """As Druid lists them: its servers (here the overlord that leads) and ORDINAL_POSITION from 0."""
    def sql(query: str) -> Any:
        response = httpx.post(f"{live_sql}/druid/v2/sql", json={"query": query, "resultFormat": "array"})
        assert response.status_code == 200, response.text
        return response.json()
    name = f"{socket.gethostname()}:{os.getpid()}"  # no advertised URL: its host and process
    assert sql("SELECT server, host, plaintext_port, tls_port, server_type, is_leader FROM sys.servers") == [
        [name, socket.gethostname(), -1, -1, "overlord", 1]]
    assert sql("SELECT COUNT(*) FROM sys.server_segments") == [[0]]
    assert sql(f"SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = '{datasource[0]}' "
               "AND ORDINAL_POSITION = 0") == [["__time"]]


@pytest.mark.parametrize(("advertised", "expected"), [
    ("https://leader.example:8443 ", ("leader.example", -1, 8443)),  # (as a .env file may leave it)
    ("http://leader.example", ("leader.example", 80, -1)),
])
def test_sys_servers_reads_the_advertised_url_as_the_settings_do(spark, engine, advertised, expected):
    from overlord.query.metadata_tables import build_metadata_table
    from segment_store import upgrade_schema
    from segment_store.leadership import claim_leadership
    from tests.helpers import fresh_database

    own = sa.create_engine(fresh_database(engine))
    upgrade_schema(own)
    with own.begin() as conn:
        claim_leadership(conn, advertised)
    [row] = build_metadata_table(spark, "sys.servers", own, dict, {}).collect()
    assert (row.host, row.plaintext_port, row.tls_port, row.is_leader) == (*expected, 1)
    own.dispose()


def test_pydruid_native_timeseries_topn_groupby_and_time_boundary_are_exact(live_sql, datasource):
    """The live overlord holds the same rows as ``datasource`` (same seed)."""
    from pydruid.client import PyDruid
    from pydruid.utils.aggregators import count, longmax, longsum
    from pydruid.utils.filters import Dimension
    from pydruid.utils.postaggregator import Field

    rows = datasource[1].to_pylist()
    client = PyDruid(live_sql, "druid/v2")

    series = client.timeseries(datasource=NAME, granularity="hour", intervals=INTERVAL,
                               aggregations={"events": longsum("count"), "rows": count("count"),
                                             "top": longmax("value_max")},
                               filter=Dimension("country") == "DE",
                               post_aggregations={"per_row": Field("events") / Field("rows")}).result
    de = [r for r in rows if r["country"] == "DE"]
    expected = {}
    for hour in range(4):  # the fourth hour has no rows: Druid's count is 0 there, its sum null (SQL-compatible)
        bucket = [r for r in de if r["__time"].hour == hour]
        events = sum(r["count"] for r in bucket) if bucket else None
        expected[_hour(T0 + hour * HOUR)] = {
            "events": events, "rows": len(bucket), "top": max((r["value_max"] for r in bucket), default=None),
            "per_row": events / len(bucket) if events is not None else None}
    assert {r["timestamp"]: r["result"] for r in series} == expected

    top = client.topn(datasource=NAME, granularity="all", intervals=INTERVAL, dimension="country",
                      metric="events", threshold=3, aggregations={"events": longsum("count")}).result
    totals: Counter[str] = Counter()
    for r in rows:
        totals[r["country"]] += r["count"]
    [only] = top
    assert only["timestamp"] == f"{T0:%Y-%m-%dT%H:%M:%S}.000Z"
    assert [(e["country"], e["events"]) for e in only["result"]] == sorted(
        totals.items(), key=lambda kv: kv[1], reverse=True)[:3]

    groups = client.groupby(datasource=NAME, granularity="all", intervals=INTERVAL, dimensions=["country", "device"],
                            aggregations={"events": longsum("count")},
                            filter=(Dimension("device") == "mobile") | (Dimension("device") == "tablet"),
                            limit_spec={"type": "default", "limit": 5,
                                        "columns": [{"dimension": "events", "direction": "descending"}]}).result
    by_group: Counter[tuple[str, str]] = Counter()
    for r in rows:
        if r["device"] in ("mobile", "tablet"):
            by_group[(r["country"], r["device"])] += r["count"]
    assert [g["event"]["events"] for g in groups] == sorted(by_group.values(), reverse=True)[:5]
    assert all(by_group[(g["event"]["country"], g["event"]["device"])] == g["event"]["events"] for g in groups)

    [bounds] = client.time_boundary(datasource=NAME).result
    times = sorted(r["__time"] for r in rows)
    assert bounds["result"] == {"minTime": f"{times[0]:%Y-%m-%dT%H:%M:%S}.000Z",
                                "maxTime": f"{times[-1]:%Y-%m-%dT%H:%M:%S}.000Z"}


def test_a_native_query_we_cannot_answer_is_a_400_naming_the_field(live_sql):
    import httpx

    refused = httpx.post(f"{live_sql}/druid/v2/", json={
        "queryType": "timeseries", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
        "aggregations": [{"type": "quantilesDoublesSketch", "name": "u", "fieldName": "country"}]})
    assert refused.status_code == 400
    assert refused.json()["errorMessage"].startswith(
        "$.aggregations[0].type: aggregator type 'quantilesDoublesSketch'")
    virtual = httpx.post(f"{live_sql}/druid/v2", json={
        "queryType": "timeseries", "dataSource": NAME, "intervals": [INTERVAL], "granularity": "all",
        "virtualColumns": [{"type": "mv-filtered", "name": "v", "delegate": "country", "values": ["DE"]}]})
    assert virtual.status_code == 400 and virtual.json()["errorMessage"].startswith("$.virtualColumns[0].type: ")
    unknown = httpx.post(f"{live_sql}/druid/v2", json={"queryType": "select", "dataSource": NAME,
                                                       "intervals": [INTERVAL]})
    assert unknown.status_code == 400 and "'select' is not supported" in unknown.json()["errorMessage"]
    for columns in (5, "country"):  # (a string was read as a list of one-letter columns)
        scan = httpx.post(f"{live_sql}/druid/v2", json={"queryType": "scan", "dataSource": NAME,
                                                        "intervals": [INTERVAL], "columns": columns})
        assert scan.status_code == 400 and scan.json()["errorMessage"].startswith("$.columns: expected"), scan.text
    deep = httpx.post(f"{live_sql}/druid/v2/sql", json={"query": f"SELECT {'(' * 400}1{')' * 400}"})
    assert deep.status_code == 400 and "nests" in deep.json()["errorMessage"], deep.text


def test_a_post_aggregator_we_cannot_answer_is_a_400_naming_the_field(live_sql):
    """An attacker's find: ``"fn": "reflect"`` answered the left operand. Every post-aggregator field is checked
    before the query runs (also over no rows), as Druid refuses them; the known functions compute.
    """

    def post(post_aggregator: dict[str, Any], interval: str = INTERVAL) -> httpx.Response:
        return httpx.post(f"{live_sql}/druid/v2", json={
            "queryType": "timeseries", "dataSource": NAME, "intervals": [interval], "granularity": "all",
            "aggregations": [{"type": "count", "name": "rows"}], "postAggregations": [post_aggregator]})

    rows, two = {"type": "fieldAccess", "fieldName": "rows"}, {"type": "constant", "name": "two", "value": 2}
    refused = [
        ("$.postAggregations[0].fn", {"type": "arithmetic", "name": "x", "fn": "reflect", "fields": [rows]}),
        ("$.postAggregations[0].fn", {"type": "arithmetic", "name": "x", "fn": "reflect", "fields": [rows, two]}),
        ("$.postAggregations[0].ordering", {"type": "arithmetic", "name": "x", "fn": "+", "fields": [rows, two],
                                            "ordering": "alphabetical"}),
        ("$.postAggregations[0].fields", {"type": "arithmetic", "name": "x", "fn": "+", "fields": [rows]}),
        ("$.postAggregations[0].fields[1].type", {"type": "arithmetic", "name": "x", "fn": "*",
                                                  "fields": [rows, {"type": "javascript", "fieldNames": ["rows"]}]}),
        ("$.postAggregations[0].fields[0].fieldName", {"type": "arithmetic", "name": "x", "fn": "*",
                                                       "fields": [{"type": "fieldAccess", "fieldName": "nope"}, two]}),
        ("$.postAggregations[0].value", {"type": "constant", "name": "x", "value": "2"}),
        ("$.postAggregations[0].name", {"type": "constant", "value": 2}),
        ("$.postAggregations[0].expression", {"type": "expression", "name": "x", "expression": "nope * 2"}),
        ("$.postAggregations[0].type", {"type": "thetaSketchEstimate", "name": "x", "field": rows}),
    ]
    for where, spec in refused:
        for interval in (INTERVAL, "2000-01-01/2000-01-02"):  # rows, and none: refused either way
            answer = post(spec, interval)
            assert answer.status_code == 400 and answer.json()["errorMessage"].startswith(f"{where}: "), (
                where, interval, answer.status_code, answer.text)
    [power] = post({"type": "arithmetic", "name": "x", "fn": "pow", "fields": [two, two],
                    "ordering": "numericFirst"}).json()
    assert power["result"]["x"] == 4


@pytest.mark.parametrize("store", ["local", "object store"])
def test_a_datasource_whose_files_cannot_be_read_does_not_hide_the_others(spark, engine, datasource, tmp_path, store):
    """Found in CI: one corrupt segment file failed every INFORMATION_SCHEMA.COLUMNS query.

    First a local one; later a 4-byte file another test left in an object store, read through fsspec.
    """
    import fsspec

    from segment_store import SegmentDescriptor
    from tests.test_timeline import publish_segments

    broken = f"broken-{uuid.uuid4().hex[:8]}"
    path = str(tmp_path / "part-00000.parquet") if store == "local" else f"memory://{broken}/part-00000.parquet"
    with fsspec.open(path, "wb") as bad_file:
        bad_file.write(b"PAR1")
    publish_segments(engine, broken, SegmentDescriptor(
        id=f"{broken}_0", datasource=broken, interval_start=T0, interval_end=T0 + HOUR, path=path,
        size_bytes=4, num_rows=1))

    columns = run_sql(spark, engine, "SELECT DISTINCT TABLE_NAME FROM INFORMATION_SCHEMA.COLUMNS", "array")
    tables = run_sql(spark, engine, "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES", "array")

    assert [datasource[0]] in columns and [broken] not in columns  # its columns cannot be known
    assert [broken] in tables  # but it exists


def test_native_interval_bound_in_and_not_filters(live_sql, datasource):
    import httpx

    rows = datasource[1].to_pylist()
    first_hour = f"{T0:%Y-%m-%dT%H:%M:%S}Z/{T0 + HOUR:%Y-%m-%dT%H:%M:%S}Z"
    query = {"queryType": "timeseries", "dataSource": NAME, "intervals": INTERVAL, "granularity": "all",
             "aggregations": [{"type": "longSum", "name": "events", "fieldName": "count"}],
             "filter": {"type": "and", "fields": [
                 {"type": "interval", "dimension": "__time", "intervals": [first_hour]},
                 {"type": "bound", "dimension": "value_max", "lower": "500", "ordering": "numeric"},
                 {"type": "not", "field": {"type": "in", "dimension": "country", "values": ["DE", "FR"]}}]}}
    [answer] = httpx.post(f"{live_sql}/druid/v2", json=query, timeout=60).json()
    expected = sum(r["count"] for r in rows if r["__time"] < T0 + HOUR and r["value_max"] >= 500
                   and r["country"] not in ("DE", "FR"))
    assert answer == {"timestamp": f"{T0:%Y-%m-%dT%H:%M:%S}.000Z", "result": {"events": expected}} and expected > 0


def test_native_filtered_sums_and_a_filter_of_a_filter(live_sql, datasource):
    import httpx

    rows = datasource[1].to_pylist()
    de = {"type": "selector", "dimension": "country", "value": "DE"}
    big = {"type": "bound", "dimension": "value_max", "lower": "500", "ordering": "numeric"}
    query = {"queryType": "timeseries", "dataSource": NAME, "intervals": INTERVAL, "granularity": "all",
             "aggregations": [
                 {"type": "filtered", "filter": de,
                  "aggregator": {"type": "longSum", "name": "de", "fieldName": "count"}},
                 {"type": "filtered", "filter": big, "aggregator": {
                     "type": "filtered", "filter": de, "aggregator": {"type": "count", "name": "both"}}}]}
    [answer] = httpx.post(f"{live_sql}/druid/v2", json=query, timeout=60).json()
    assert answer["result"] == {"de": sum(r["count"] for r in rows if r["country"] == "DE"),
                                "both": sum(1 for r in rows if r["country"] == "DE" and r["value_max"] >= 500)}


def test_native_first_and_last_by_another_time_column(live_sql, datasource):
    import httpx

    rows = datasource[1].to_pylist()
    query = {"queryType": "timeseries", "dataSource": NAME, "intervals": INTERVAL, "granularity": "all",
             "aggregations": [{"type": "longFirst", "name": "first", "fieldName": "value_min",
                               "timeColumn": "value_max"},
                              {"type": "longLast", "name": "last", "fieldName": "value_min",
                               "timeColumn": "value_max"}]}
    [answer] = httpx.post(f"{live_sql}/druid/v2", json=query, timeout=60).json()
    low, high = min(r["value_max"] for r in rows), max(r["value_max"] for r in rows)
    assert answer["result"]["first"] in {r["value_min"] for r in rows if r["value_max"] == low}
    assert answer["result"]["last"] in {r["value_min"] for r in rows if r["value_max"] == high}
    refused = httpx.post(f"{live_sql}/druid/v2/sql", json={"query": f'SELECT EARLIEST_BY(country, value_max) '
                                                                   f'FROM "{NAME}"'}, timeout=60)
    assert refused.status_code == 400 and "MILLIS_TO_TIMESTAMP(value_max)" in refused.json()["errorMessage"]


def test_native_scan_and_segment_metadata(live_sql, datasource):
    import httpx

    rows = sorted(datasource[1].to_pylist(), key=lambda r: r["__time"])
    scan = httpx.post(f"{live_sql}/druid/v2", timeout=60, json={
        "queryType": "scan", "dataSource": NAME, "intervals": [INTERVAL], "columns": ["__time", "country", "count"],
        "order": "ascending", "limit": 5, "resultFormat": "compactedList"}).json()
    [batch] = scan
    assert batch["columns"] == ["__time", "country", "count"]
    assert [e[0] for e in batch["events"]] == [int(r["__time"].timestamp() * 1000) for r in rows[:5]]

    [meta] = httpx.post(f"{live_sql}/druid/v2", timeout=60, json={
        "queryType": "segmentMetadata", "dataSource": NAME, "merge": True}).json()
    assert meta["numRows"] == len(rows)
    assert {n: c["type"] for n, c in meta["columns"].items()} == {
        "__time": "LONG", "country": "STRING", "device": "STRING", "count": "LONG", "value_sum": "LONG",
        "value_min": "LONG", "value_max": "LONG", "price_sum": "DOUBLE"}
    unmerged = httpx.post(f"{live_sql}/druid/v2", timeout=60, json={"queryType": "segmentMetadata", "dataSource": NAME})
    assert unmerged.status_code == 400 and unmerged.json()["errorMessage"].startswith("$.merge")


def test_sys_supervisors_lists_the_stored_supervisors_with_their_state(spark, engine):
    """Built from the metadata store: suspended, or unhealthy after a failed last task, or running."""
    store = MetadataStore(engine)
    ids = [f"sup-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    for i, sup in enumerate(ids):
        store.append_spec(sup, spec_json(sup, f"topic-{sup}"), suspended=i == 1)
    store.append_spec(ids[3], spec_json(ids[3], "t"), terminated=True)
    store.insert_task(f"task-{ids[2]}", ids[2], ids[2], {0: 0}, {0: 5})
    store.finish_task(f"task-{ids[2]}", "FAILED", "boom", None)
    store.task_rows.flush()  # written behind: the query engine's process reads the table itself
    rows = run_sql(spark, engine, "SELECT supervisor_id, state, detailed_state, healthy, type, source, suspended, "
                   f"spec FROM sys.supervisors WHERE supervisor_id IN ({', '.join(repr(i) for i in ids)}) ORDER BY 1")
    assert {(r["supervisor_id"], r["state"], r["healthy"], r["suspended"], r["type"], r["source"]) for r in rows} == {
        (ids[0], "RUNNING", 1, 0, "kafka", f"topic-{ids[0]}"),
        (ids[1], "SUSPENDED", 1, 1, "kafka", f"topic-{ids[1]}"),
        (ids[2], "UNHEALTHY_TASKS", 0, 0, "kafka", f"topic-{ids[2]}")}  # the terminated one is not listed
    assert all(json.loads(r["spec"])["spec"]["dataSchema"]["dataSource"] == r["supervisor_id"] for r in rows)


def _as_go_marshals(body: dict[str, Any]) -> bytes:
    """JSON as Go's ``json.Marshal`` writes it (compact; ``<``, ``>``, ``&`` escaped), as Grafana's plugin sends."""
    text = json.dumps(body, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def test_grafana_druid_plugin_requests_as_it_sends_them(live_sql, datasource):
    """grafadruid-druid-datasource (go-druid v0.0.6): /status, SQL as arrays with a header, native queries with
    an intervals object and a string context; its time columns must match Go's ``2006-01-02T15:04:05.000Z``.
    """
    import httpx

    rows = datasource[1].to_pylist()
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    status = httpx.get(f"{live_sql}/status", headers={"Accept": "application/json"}, timeout=30)
    assert status.status_code == 200 and isinstance(status.json().get("version"), str)

    start = T0 + HOUR
    sql = {"queryType": "sql", "context": {"plop": "plip", "timeout": "60000"},
           "query": f'SELECT __time, country, "count" FROM "{NAME}" WHERE __time >= '
                    f"MILLIS_TO_TIMESTAMP({int(start.timestamp() * 1000)}) ORDER BY __time, country",
           "resultFormat": "array", "header": True}
    answer = httpx.post(f"{live_sql}/druid/v2/sql", content=_as_go_marshals(sql), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    header, *table = answer.json()
    assert header == ["__time", "country", "count"]
    expected = sorted((r["__time"], r["country"], r["count"]) for r in rows if r["__time"] >= start)
    assert sorted(tuple(r) for r in table) == [(f"{t:%Y-%m-%dT%H:%M:%S}.000Z", c, n) for t, c, n in expected]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r[0]) for r in table)

    intervals = {"type": "intervals", "intervals": [f"{T0:%Y-%m-%dT%H:%M:%S}.000Z/"
                                                    f"{T0 + 3 * HOUR:%Y-%m-%dT%H:%M:%S}.000Z"]}
    series = {"queryType": "timeseries", "dataSource": {"type": "table", "name": NAME}, "intervals": intervals,
              "context": {"plop": "plep"}, "descending": False,
              "filter": {"type": "selector", "dimension": "country", "value": "DE"}, "granularity": "hour",
              "aggregations": [{"type": "count", "name": "count"},
                               {"type": "longSum", "name": "events", "fieldName": "count"}]}
    answer = httpx.post(f"{live_sql}/druid/v2", content=_as_go_marshals(series), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    expected_series = {}
    for hour in range(3):
        bucket = [r for r in rows if r["country"] == "DE" and r["__time"].hour == hour]
        expected_series[_hour(T0 + hour * HOUR)] = {"count": len(bucket), "events": sum(r["count"] for r in bucket)}
    assert {r["timestamp"]: r["result"] for r in answer.json()} == expected_series

    scan = {"queryType": "scan", "dataSource": {"type": "table", "name": NAME}, "intervals": intervals,
            "columns": ["__time", "country"], "order": "ascending", "limit": 3, "resultFormat": "compactedList"}
    answer = httpx.post(f"{live_sql}/druid/v2", content=_as_go_marshals(scan), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    first = sorted(rows, key=lambda r: r["__time"])[:3]
    assert answer.json()[0]["events"] == [[int(r["__time"].timestamp() * 1000), r["country"]] for r in first]


@pytest.mark.parametrize("result_format", ["object", "array", "csv"])
def test_types_headers_in_druids_shapes(live_sql, datasource, result_format):
    """Druid's table: types inside the header object for objects, rows of their own for arrays and CSV."""
    import httpx

    body = {"query": f'SELECT __time, country, "count", price_sum FROM "{NAME}" ORDER BY __time, country LIMIT 1',
            "resultFormat": result_format, "header": True, "typesHeader": True, "sqlTypesHeader": True}
    answer = httpx.post(f"{live_sql}/druid/v2/sql", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Druid-SQL-Header-Included"] == "yes"
    names, kinds, sql_kinds = (["__time", "country", "count", "price_sum"], ["LONG", "STRING", "LONG", "DOUBLE"],
                               ["TIMESTAMP", "VARCHAR", "BIGINT", "DOUBLE"])
    if result_format == "object":
        assert answer.json()[0] == {n: {"type": k, "sqlType": s}
                                    for n, k, s in zip(names, kinds, sql_kinds, strict=True)}
        assert len(answer.json()) == 2
    elif result_format == "array":
        assert answer.json()[:3] == [names, kinds, sql_kinds] and len(answer.json()) == 4
    else:
        assert answer.text.splitlines()[:3] == [",".join(names), ",".join(kinds), ",".join(sql_kinds)]
    only_sql = httpx.post(f"{live_sql}/druid/v2/sql", timeout=60, json=body | {"typesHeader": False})
    assert only_sql.status_code == 200
    if result_format == "object":
        assert only_sql.json()[0] == {n: {"sqlType": s} for n, s in zip(names, sql_kinds, strict=True)}
    without_header = httpx.post(f"{live_sql}/druid/v2/sql", timeout=60, json=body | {"header": False})
    assert without_header.status_code == 400
    assert without_header.json()["errorMessage"] == "typesHeader: requires header to be true"
