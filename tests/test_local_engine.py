"""Small queries on DuckDB: the same answers as Spark's, never more access than Spark's views.

Every query of the differential corpus runs twice on real Spark, PostgreSQL and Parquet files,
once with the local engine and once without: the local run must have been DuckDB's and give
Spark's exact columns and rows. Queries DuckDB might answer differently must go to Spark.
Queries that try to reach files, functions or settings must never run on DuckDB.
"""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from overlord.query.engine import QueryLimits, execute_sql
from overlord.query.local_engine import LocalEngine
from overlord.query.query_errors import QueryError
from overlord.query.running import cancel_query
from tests.test_time_pruning import at, times, ts
from tests.test_timeline import publish_segments, random_rows, write_segment

HOURS = 4


@pytest.fixture(scope="module")
def deep(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("deep"))


@pytest.fixture(scope="module")
def ds(engine, deep) -> str:
    """Four hours of segments; one has a dimension the others lack, one has null dimensions and odd strings."""
    datasource = f"local-{uuid.uuid4().hex[:8]}"
    rng = random.Random(7)
    for hour in range(HOURS):
        for part in range(2):
            start = at(hour)
            table = random_rows(rng, 40, start, start + timedelta(hours=1))
            if (hour, part) == (1, 1):
                table = table.append_column("city", pa.array([f"c{i % 3}" for i in range(table.num_rows)]))
            if (hour, part) == (2, 0):
                odd = ["it's", "a\\nb", "ü", "", None, "a_b", "a%b", "NULL"]
                table = table.set_column(1, "country", pa.array([odd[i % len(odd)] for i in range(table.num_rows)]))
                table = table.set_column(2, "device", pa.nulls(table.num_rows, pa.string()))
            written = write_segment(deep, datasource, start, table, part=part)
            publish_segments(engine, datasource, replace(written, details=times(
                pc.min(table["__time"]).as_py(), pc.max(table["__time"]).as_py())))
    return datasource


@pytest.fixture(scope="module")
def local(deep) -> LocalEngine:
    return LocalEngine(deep, max_bytes=2**30)


SAME = [
    'SELECT country, device, SUM("count") AS n, SUM(value_sum) AS v, MAX(value_max) AS top, MIN(value_min) AS low, '
    "AVG(price_sum) AS price FROM {ds} GROUP BY country, device ORDER BY country, device",
    'SELECT COUNT(*) AS n, COUNT(DISTINCT country) AS countries, SUM(price_sum) AS p FROM {ds}',
    f'SELECT country, SUM("count") AS n FROM {{ds}} WHERE __time >= {ts(1)} AND __time < {ts(2)} '
    "GROUP BY country ORDER BY n DESC, country",
    'SELECT * FROM {ds} ORDER BY __time, country, device, "count", value_sum',
    f'SELECT * FROM {{ds}} WHERE __time >= {ts(2)} AND __time < {ts(3)} ORDER BY __time, country, "count", value_sum',
    f"SELECT city, COUNT(*) AS n FROM {{ds}} WHERE __time >= {ts(3)} GROUP BY city ORDER BY city",
    "SELECT city, COUNT(*) AS n FROM {ds} GROUP BY city ORDER BY city",
    "SELECT country FROM {ds} ORDER BY country DESC LIMIT 7 OFFSET 2",
    "SELECT country, device FROM {ds} WHERE device IS NULL OR country IN ('DE', 'it''s', '') "
    "ORDER BY country NULLS LAST, device",
    "SELECT country FROM {ds} WHERE country LIKE 'a%' OR country LIKE '_t%' OR country NOT LIKE '%E' "
    "ORDER BY country",
    "SELECT country, value_max FROM {ds} WHERE value_max BETWEEN 100 AND 300 AND NOT (country = 'US') "
    "ORDER BY value_max, country",
    "SELECT TIME_FLOOR(__time, 'PT1H') AS t, COUNT(*) AS n FROM {ds} GROUP BY 1 ORDER BY 1",
    "SELECT TIME_FLOOR(__time, 'PT15M') AS t, SUM(\"count\") AS n FROM {ds} GROUP BY 1 ORDER BY 1",
    "SELECT TIME_FLOOR(__time, 'P1D') AS t, FLOOR(__time TO HOUR) AS h, COUNT(*) AS n FROM druid.{ds} "
    "GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT TIME_FLOOR(CAST(__time AS TIMESTAMP), 'PT1H') AS __timestamp, COUNT(*) AS \"count\" FROM druid.{ds} "
    "WHERE __time >= TIME_PARSE('2026-11-01T01:00:00Z') AND __time < TIME_PARSE('2026-11-01T03:00:00') "
    "GROUP BY TIME_FLOOR(CAST(__time AS TIMESTAMP), 'PT1H') ORDER BY 1 LIMIT 10000",
    "SELECT TIMESTAMP_TO_MILLIS(__time) AS ms, MILLIS_TO_TIMESTAMP(TIMESTAMP_TO_MILLIS(__time)) AS back "
    "FROM {ds} ORDER BY 1 LIMIT 5",
    "SELECT country, LATEST(value_max) AS latest, EARLIEST_BY(value_min, __time) AS earliest FROM {ds} "
    "WHERE country IN ('DE', 'FR') GROUP BY country ORDER BY country",
    "SELECT LATEST(device) AS latest, EARLIEST(device) AS earliest FROM {ds} WHERE __time < "
    "TIMESTAMP '2026-11-01 02:00:00' OR country = 'it''s'",  # the latest row has no device: NULL, as in Spark
    "SELECT CONCAT(country, '-', device) AS cd, NVL(device, 'none') AS d, COALESCE(device, country, 'x') AS e, "
    "CASE WHEN value_max > 500 THEN 'high' WHEN value_max > 0 THEN 'mid' "
    "ELSE 'low' END AS band FROM {ds} ORDER BY __time, country, device, \"count\", value_sum",
    'SELECT country, SUM("count") / 2 AS half, SUM(value_sum) * 3 - 1 AS v, -SUM(price_sum) AS neg, '
    "SUM(value_sum) / 4 AS q, SUM(price_sum) * 2 AS p FROM {ds} WHERE price_sum > 0.5 GROUP BY country "
    "HAVING SUM(\"count\") > 10 ORDER BY country",
    'WITH h AS (SELECT country, SUM("count") AS n FROM {ds} GROUP BY country) '
    "SELECT a.country, a.n, b.n AS m FROM h a JOIN h b ON a.country = b.country ORDER BY a.country",
    "SELECT a.country, COUNT(*) AS n FROM {ds} a LEFT JOIN (SELECT DISTINCT device FROM {ds}) b "
    "ON a.device = b.device GROUP BY a.country ORDER BY a.country",
    f"SELECT COUNT(*) AS n FROM {{ds}} WHERE __time < {ts(1)} UNION ALL SELECT COUNT(*) FROM {{ds}} "
    f"WHERE __time >= {ts(3)} ORDER BY n",
    "SELECT country, n FROM (SELECT country, COUNT(*) AS n FROM {ds} GROUP BY country) t WHERE n > 5 "
    "ORDER BY n, country",
    "SELECT COUNT(*) AS n FROM {ds} WHERE __time >= CAST('2026-11-01 02:00:00' AS TIMESTAMP)",
    "SELECT COUNT(*) AS n FROM {ds} WHERE __time >= TIMESTAMP '2026-11-01 01:30:00+02:00'",
    'SELECT "country", "COUNT"(*) AS "n" FROM {ds} GROUP BY "country" ORDER BY "country"',
    "SELECT Country, t.DEVICE, t.device AS d FROM {ds} t ORDER BY 1, 2, __time, \"count\", value_sum",
    "SELECT country FROM {ds} WHERE country = 'a\\nb' OR country = 'it\\'s' OR country = 'ü' ORDER BY 1",
    "SELECT COUNT(*) AS n FROM {ds} WHERE __time >= '2026-11-01 02:00' AND __time < '2026-11-01T03:00:00Z'",
    "SELECT country FROM {ds} WHERE country IN (SELECT country FROM {ds} WHERE value_max > 900) ORDER BY 1",
]


def run(spark, engine, sql: str, local: LocalEngine | None, parameters: Any = ()) -> Any:
    return execute_sql(spark, engine, sql, parameters, local=local)


@pytest.mark.parametrize("sql", SAME)
def test_duckdb_answers_exactly_as_spark(spark, engine, ds, local, sql):
    query = sql.format(ds=f'"{ds}"')
    ours = run(spark, engine, query, local)
    spark_result = run(spark, engine, query, None)
    assert (ours.engine, spark_result.engine) == ("duckdb", "spark")
    assert ours.columns == spark_result.columns
    assert ours.table.schema.types == spark_result.table.schema.types or _same_kinds(ours.table, spark_result.table)
    assert _close(ours.rows(), spark_result.rows()), [
        (x, y) for x, y in zip(ours.rows(), spark_result.rows(), strict=False) if x != y][:3]
    assert ours.rows(), "the corpus should not be vacuous"


@pytest.mark.parametrize("parameters", [[at(1), "DE", 100], ["2026-11-01 01:00:00", "it's", -5]])
def test_parameters_mean_the_same(spark, engine, ds, local, parameters):
    """Bound in the order they appear in the text (a CTE's first), as Spark binds them."""
    sql = (f'WITH x AS (SELECT * FROM "{ds}" WHERE __time >= ?) SELECT COUNT(*) AS n FROM x '
           "WHERE country <> ? AND value_max > ?")
    ours = run(spark, engine, sql, local, parameters)
    assert ours.engine == "duckdb"
    assert ours.rows() == run(spark, engine, sql, None, parameters).rows()


@pytest.mark.parametrize("sql", [
    "SELECT country, COUNT(*) FROM {ds} GROUP BY country",  # unnamed: Spark and DuckDB name it differently
    "SELECT APPROX_COUNT_DISTINCT(country) AS n FROM {ds}",  # different sketches
    "SELECT country FROM {ds} WHERE country LIKE 'a\\_b'",  # Spark's default escape
    'SELECT SUM("count") / COUNT(device) AS r FROM {ds}',  # Spark fails on a zero divisor
    'SELECT SUM("count") / 4.0 AS r FROM {ds}',  # Spark's quotient is a DECIMAL, DuckDB's a DOUBLE
    'SELECT SUM("count") * 1.5 AS r FROM {ds}',  # DECIMALs of other precisions
    "SELECT STRLEN(country) AS n FROM {ds}",
    "SELECT * FROM INFORMATION_SCHEMA.TABLES",
    "SELECT country, ROW_NUMBER() OVER (ORDER BY country) AS r FROM {ds}",
    "SELECT CAST(country AS INT) AS n FROM {ds}",
    "SELECT country FROM {ds} EXCEPT SELECT device FROM {ds}",
    # where the engines convert implicitly, they convert differently
    "SELECT CONCAT(country, price_sum) AS c FROM {ds}",
    "SELECT country || __time AS c FROM {ds}",
    "SELECT COALESCE(value_max, 'x') AS c FROM {ds}",
    "SELECT CASE WHEN value_max > 5 THEN country ELSE 5 END AS c FROM {ds}",
    "SELECT COUNT(*) AS n FROM {ds} WHERE value_max = '5.0'",
    "SELECT COUNT(*) AS n FROM {ds} WHERE __time >= '2026-1-5'",
    "SELECT COUNT(*) AS n FROM {ds} WHERE value_max IN ('5', 6)",
    "SELECT SUM(country) AS n FROM {ds}",
    "SELECT COUNT(*) AS n FROM {ds} WHERE value_max > 1.5 * 2",
    # found in review: each of these was answered by DuckDB otherwise than by Spark (or where Spark fails)
    "SELECT UPPER(country) AS u FROM {ds}",  # 'ß' -> 'SS' in Spark, 'ẞ' in DuckDB
    "SELECT -value_max AS value_max FROM {ds} ORDER BY value_max + 0",  # Spark sorts by the alias
    "SELECT date_trunc('m', __time) AS t FROM {ds}",  # Spark: NULL for an unknown unit
    "SELECT date_trunc(HOUR, __time) AS t FROM {ds}",  # Spark: HOUR is a column
    'SELECT SUM("count") / 10000000000000000000 AS q FROM {ds}',  # beyond BIGINT: Spark's DECIMAL
    "SELECT COUNT(*) AS n FROM {ds} WHERE __time >= TIMESTAMP '2026-11-01 24:00:00'",
    "SELECT COUNT(*) AS n FROM {ds} WHERE __time >= TIMESTAMP '2026-11-01 12:00:00+19:00'",
    'SELECT COUNT(*) AS n FROM {ds} WHERE "count"',  # Spark: not a boolean
    'SELECT "count" AS x FROM {ds} UNION ALL SELECT country FROM {ds}',  # Spark: incompatible types
    'SELECT "count" * 2 AS m FROM {ds} WHERE m > 2',  # Spark: no alias in WHERE
    "SELECT * REPLACE (country AS device) FROM {ds}",
    "SELECT COUNT(*) AS n FROM {ds} WHERE value_max BETWEEN SYMMETRIC 300 AND 100",
    "SELECT COUNT(*) AS n FROM {ds} WHERE price_sum > 1e400",
])
def test_what_duckdb_might_answer_differently_runs_on_spark(spark, engine, ds, local, sql):
    query = sql.format(ds=f'"{ds}"')
    try:
        assert run(spark, engine, query, local).engine == "spark"
    except QueryError:
        pass  # Spark's own error: DuckDB was not asked


def test_a_query_over_the_size_limit_runs_on_spark(spark, engine, ds, deep):
    sql = f'SELECT COUNT(*) AS n FROM "{ds}"'
    assert run(spark, engine, sql, LocalEngine(deep, max_bytes=1)).engine == "spark"
    assert run(spark, engine, sql, LocalEngine(deep, max_bytes=0)).engine == "spark"
    pruned = f'SELECT COUNT(*) AS n FROM "{ds}" WHERE __time >= {ts(9)}'  # no file left to read: 0 bytes
    result = run(spark, engine, pruned, LocalEngine(deep, max_bytes=1))
    assert (result.engine, result.rows()) == ("duckdb", [[0]])


def test_user_errors_are_sparks(spark, engine, ds, local):
    with pytest.raises(QueryError) as local_error:
        run(spark, engine, f'SELECT nope FROM "{ds}"', local)
    with pytest.raises(QueryError) as spark_error:
        run(spark, engine, f'SELECT nope FROM "{ds}"', None)
    assert str(local_error.value) == str(spark_error.value)


def test_a_local_query_is_cancelled_and_timed_out(spark, engine, ds, local):
    slow = f'SELECT COUNT(*) AS n FROM "{ds}" a, "{ds}" b, "{ds}" c, "{ds}" d WHERE a.value_max > b.value_min'
    with pytest.raises(QueryError, match="timeout of 300 ms"):
        execute_sql(spark, engine, slow, limits=replace(QueryLimits(), timeout_ms=300), local=local)
    query_id = uuid.uuid4().hex
    threading.Timer(0.5, cancel_query, [query_id]).start()
    with pytest.raises(QueryError, match="was cancelled"):
        execute_sql(spark, engine, slow, query_id=query_id, local=local)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_parquet('{file}')",
    "SELECT * FROM '{file}'",
    "SELECT * FROM \"{file}\"",
    "WITH \"{file}\" AS (SELECT 1 AS x) SELECT * FROM (SELECT 2 AS y) t, \"{file}\"",
    "SELECT * FROM (WITH \"{file}\" AS (SELECT 1 AS x) SELECT * FROM \"{file}\") t, \"{file}\"",
    "SELECT * FROM parquet_scan(['{file}'])",
    "SELECT * FROM glob('{deep}/*')",
    "SELECT current_setting('allowed_directories') AS s",
    "SELECT * FROM duckdb_settings()",
    "SELECT getenv('HOME') AS h",
    "COPY (SELECT 1) TO '{deep}/x.csv'",
    "ATTACH '{deep}/x.db'",
    "SET enable_external_access = true",
    "SELECT * FROM main.{ds}",
    "SELECT * FROM {ds}; SELECT 1",
    "SUMMARIZE {ds}",
    "SELECT * FROM query('SELECT 1')",
    "SELECT a.country AS c, z.* FROM {ds} a JOIN (WITH pg_settings AS (SELECT 1 AS q) SELECT q FROM pg_settings) b "
    "ON 1 = 1 JOIN pg_settings z ON 1 = 1",
    "SELECT a.country AS c, z.* FROM {ds} a JOIN (WITH duckdb_views AS (SELECT 1 AS q) SELECT q FROM duckdb_views) b "
    "ON 1 = 1 JOIN duckdb_views z ON 1 = 1",
])
def test_duckdb_is_never_asked_to_reach_beyond_the_views(spark, engine, ds, deep, local, tmp_path, sql):
    unpublished = write_segment(deep, ds, at(0), random_rows(random.Random(1), 5, at(0), at(1)), part=9).path
    query = sql.format(file=unpublished, deep=deep, ds=f'"{ds}"')
    try:
        result = run(spark, engine, query, local)
    except QueryError:
        return  # refused by Spark's sandbox or Spark's parser
    assert result.engine == "spark"
    assert not any(isinstance(v, str) and deep in v for row in result.rows() for v in row)


def test_the_database_itself_reads_only_the_deep_storage_root(deep, tmp_path):
    import duckdb

    outside = tmp_path / "outside.parquet"
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"x": [1]}), outside)
    local = LocalEngine(deep, max_bytes=2**30)
    cursor = local._db.cursor()
    with pytest.raises(duckdb.PermissionException):
        cursor.execute(f"SELECT * FROM read_parquet('{outside}')")
    with pytest.raises(duckdb.InvalidInputException):
        cursor.execute("SET enable_external_access = true")
    [[allowed]] = cursor.execute("SELECT current_setting('allowed_directories')").fetchall()
    assert [d.rstrip("/") for d in allowed] == [deep.rstrip("/")]  # no temporary directory beside it


def _same_kinds(a: pa.Table, b: pa.Table) -> bool:
    """Timestamps may differ in time zone annotation only (both are UTC instants)."""
    return all(x == y or (pa.types.is_timestamp(x) and pa.types.is_timestamp(y))
               for x, y in zip(a.schema.types, b.schema.types, strict=True))


def _close(a: list[list[Any]], b: list[list[Any]]) -> bool:
    """Equal rows; double sums may differ in their last bits (summation order)."""
    if len(a) != len(b):
        return False
    for x_row, y_row in zip(a, b, strict=True):
        for x, y in zip(x_row, y_row, strict=True):
            if x != y and not (isinstance(x, float) and isinstance(y, float)
                               and abs(x - y) <= 1e-9 * max(abs(x), 1.0)):
                return False
    return True
