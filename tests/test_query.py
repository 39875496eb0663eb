"""SQL over published segments on real Spark, PostgreSQL and Parquet: reference results, only the
visible files, Druid's result formats, and bad or non-read-only queries rejected as user errors.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

from overlord.cli.main import _parser
from overlord.query.engine import QueryLimits, SqlQuery, execute_sql, run_sql
from overlord.query.query_errors import QueryError
from overlord.query.time_pruning import TimeRange
from segment_store import visible_segments
from segment_store.schema import segments as segment_status
from tests.helpers import wait_until
from tests.test_timeline import HOUR, T0, fake_compact, publish_random, random_rows, write_segment


@pytest.fixture(scope="module", params=["local", "s3"])
def published(request, engine, tmp_path_factory) -> tuple[str, pa.Table]:
    """A datasource named like Druid's (with a '-'): two hours, one compacted, plus files no query may
    read; on a local segment root and on S3 (moto).
    """
    datasource = f"ds-{uuid.uuid4().hex[:8]}"
    root = str(tmp_path_factory.mktemp("deep"))
    if request.param == "s3":
        request.getfixturevalue("s3_endpoint")
        root = f"s3://{datasource}"
        s3fs.S3FileSystem(skip_instance_cache=True).mkdir(datasource)
    rng = random.Random(11)
    first = [publish_random(engine, root, datasource, rng, T0, 40) for _ in range(3)]
    assert fake_compact(engine, root, datasource, T0).ok  # v1 files now unused, still on disk
    second = [publish_random(engine, root, datasource, rng, T0 + HOUR, 40) for _ in range(2)]
    write_segment(root, datasource, T0 + HOUR, random_rows(rng, 30, T0 + HOUR, T0 + 2 * HOUR))  # orphan
    return datasource, pa.concat_tables(first + second)


def test_results_match_a_reference_computation(spark, engine, published):
    datasource, table = published
    expected: dict[str, list[float]] = defaultdict(lambda: [0, 0, 10**9, -(10**9), 0.0])
    for row in table.to_pylist():
        acc = expected[row["country"]]
        acc[0] += row["count"]
        acc[1] += row["value_sum"]
        acc[2] = min(acc[2], row["value_min"])
        acc[3] = max(acc[3], row["value_max"])
        acc[4] += row["price_sum"]

    rows = run_sql(spark, engine, 'SELECT country, SUM("count") AS events, SUM(value_sum) AS v, MIN(value_min), '
                   f'MAX(value_max), SUM(price_sum) AS price FROM "{datasource}" GROUP BY country ORDER BY country')

    assert [r["country"] for r in rows] == sorted(expected)
    for r in rows:
        events, value, low, high, price = expected[r["country"]]
        assert (r["events"], r["v"], r["min(value_min)"], r["max(value_max)"]) == (events, value, low, high)
        assert r["price"] == pytest.approx(price, rel=1e-12)


def test_time_filter_time_series_and_result_formats(spark, engine, published):
    datasource, table = published
    late = sum(r["count"] for r in table.to_pylist() if r["__time"] >= T0 + HOUR + 30 * (HOUR / 60))
    by_hour = {T0: 0, T0 + HOUR: 0}
    for r in table.to_pylist():
        by_hour[r["__time"].replace(minute=0)] += r["count"]
    sql = (f"SELECT date_trunc('HOUR', __time) AS hour, SUM(\"count\") AS events FROM `{datasource}` "
           "GROUP BY 1 ORDER BY 1")

    assert run_sql(spark, engine, f'SELECT SUM("count") AS n FROM "{datasource}" '
                   "WHERE __time >= TIMESTAMP '2026-11-01 01:30:00'") == [{"n": late}]
    assert run_sql(spark, engine, sql, "array", header=True) == [
        ["hour", "events"], ["2026-11-01T00:00:00.000Z", by_hour[T0]], ["2026-11-01T01:00:00.000Z", by_hour[T0 + HOUR]]]
    assert run_sql(spark, engine, sql, "object", header=True)[0] == {"hour": None, "events": None}
    assert run_sql(spark, engine, sql, "csv", header=True) == (
        f"hour,events\n2026-11-01T00:00:00.000Z,{by_hour[T0]}\n2026-11-01T01:00:00.000Z,{by_hour[T0 + HOUR]}\n\n")
    assert run_sql(spark, engine, sql, "arrayLines").splitlines()[-1] == ""
    assert SqlQuery.model_validate({"query": f'SELECT COUNT(*) AS n FROM "{datasource}" WHERE country = ?',
                                    "resultFormat": "array", "parameters": [{"type": "VARCHAR", "value": "DE"}]}
                                   ).run(spark, engine) == [[sum(1 for r in table.to_pylist() if r["country"] == "DE")]]


def test_only_visible_files_are_read(spark, engine, published, request):
    from overlord.query.engine import _query_session

    datasource, table = published
    [[rows]] = run_sql(spark, engine, f'SELECT COUNT(*) FROM "{datasource}"', "array")
    assert rows == table.num_rows  # the unused and the orphan files hold rows too: none was read
    if request.node.callspec.params["published"] == "local":  # S3 files are read through fsspec: no file name
        files = _query_session(spark).frames[datasource][1].inputFiles()
        assert len(files) == 3  # the compacted hour (1 file) and the second hour's 2


@pytest.mark.parametrize("sql, expected", [
    ("SELEC 1", "PARSE_SYNTAX_ERROR"),
    ("SELECT * FROM no_such_datasource", "no_such_datasource"),
    ("SELECT no_such_column FROM {ds}", "no_such_column"),
    ("SELECT 1; DROP TABLE x", "PARSE_SYNTAX_ERROR"),
    ("DROP TABLE {ds}", "only read-only queries"),
    ("SELECT input_file_name() FROM {ds}", "not allowed"),  # the server's file paths
    ("CREATE TABLE x AS SELECT * FROM {ds}", "only read-only queries"),
    ("INSERT INTO {ds} SELECT * FROM {ds}", "only read-only queries"),
    ("WITH a AS (SELECT 1) INSERT INTO x SELECT * FROM a", "only read-only queries"),
    ("INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT 1", "only read-only queries"),
    ("CACHE TABLE x AS SELECT 1", "only read-only queries"),
    ("SET spark.sql.runSQLOnFiles=true", "only read-only queries"),
    ("EXECUTE IMMEDIATE 'DROP TABLE x'", "only read-only queries"),
    ("SELECT TRANSFORM(country) USING 'cat' FROM {ds}", "only read-only queries"),
    ("SELECT (SELECT TRANSFORM(country) USING 'cat' FROM {ds} LIMIT 1)", "only read-only queries"),
    ("WITH a AS (SELECT TRANSFORM(1) USING 'cat') SELECT * FROM a", "only read-only queries"),
    ("SELECT 1 WHERE EXISTS (SELECT TRANSFORM(1) USING 'cat')", "only read-only queries"),
    ("SELECT reflect('java.lang.System', 'exit', 0)", "reflect() is not allowed"),
    ("SELECT * FROM (SELECT JAVA_METHOD('java.util.UUID', 'randomUUID'))", "java_method() is not allowed"),
    ("SELECT `try_reflect`('java.util.UUID', 'randomUUID')", "try_reflect() is not allowed"),
    ("SELECT * FROM parquet.`/etc/passwd`", "TABLE_OR_VIEW_NOT_FOUND"),
    ("SELECT * FROM read_files('/etc/passwd')", "table function read_files() is not allowed"),
    ("SELECT sum(1) OVER w FROM {ds} WINDOW w AS (ORDER BY reflect('java.util.UUID', 'randomUUID'))",
     "reflect() is not allowed"),
    ("SELECT * FROM {ds} LATERAL VIEW explode(array(java_method('java.util.UUID', 'randomUUID'))) t AS u",
     "java_method() is not allowed"),
    ("SELECT * FROM {ds} LATERAL VIEW reflect('java.util.UUID', 'randomUUID') t AS u", "reflect() is not allowed"),
    ("SELECT transform(array(1), x -> reflect('java.util.UUID', 'randomUUID'))", "reflect() is not allowed"),
    ("SELECT system.builtin.reflect('java.util.UUID', 'randomUUID')", "reflect() is not allowed"),
    ("SELECT IDENTIFIER('ref' || 'lect')('java.util.UUID', 'randomUUID')", "UNRESOLVED_ROUTINE"),  # dropped
    ("SELECT /*+ BROADCAST(d) */ reflect('java.util.UUID', 'randomUUID') FROM {ds} d", "reflect() is not allowed"),
    ("CREATE TEMPORARY FUNCTION f AS 'org.example.Evil'", "only read-only queries"),
    ("ADD JAR '/tmp/evil.jar'", "only read-only queries"),
    ("SELECT xpath('<a><b>1</b></a>', 'a/b')", "xpath() is not allowed"),
    ("SELECT repeat('x', 100000000)", "value-size limit"),
    ("SELECT repeat(repeat('x', 10000), 10000)", "value-size limit"),
    ("SELECT lpad('x', 2147483647)", "value-size limit"),
    ("SELECT sequence(1, 1000000000)", "value-size limit"),
    ("SELECT array_repeat(1, count(*)) FROM {ds}", "value-size limit"),
    ("SELECT explode(sequence(1, value_sum)) FROM {ds}", "value-size limit"),
    ("SELECT 1 / 0", "DIVIDE_BY_ZERO"),
    ("SELECT map('k', 1, 'k', 2)", "DUPLICATED_MAP_KEY"),  # SQLSTATE 23505: was a 500
    ("SELECT (SELECT id FROM range(2))", "SCALAR_SUBQUERY_TOO_MANY_ROWS"),  # SQLSTATE 21000
])
def test_bad_queries_are_user_errors(spark, engine, published, sql, expected):
    with pytest.raises(QueryError) as caught:
        execute_sql(spark, engine, sql.format(ds=f'"{published[0]}"'))
    assert expected in caught.value.message and "Traceback" not in caught.value.message
    body = caught.value.to_druid()
    assert body["errorCode"] == "invalidInput" and body["errorMessage"] == caught.value.message


HIDDEN_TRANSFORMS = [
    "SELECT country, count(*) OVER w FROM {ds} WINDOW w AS (PARTITION BY (SELECT max(a) FROM "
    "(SELECT TRANSFORM(country) USING 'touch {marker}' AS (a) FROM {ds})))",
    "SELECT (SELECT max(a) FROM (SELECT TRANSFORM(1) USING 'touch {marker}' AS (a)))",
    "WITH c AS (SELECT TRANSFORM(1) USING 'touch {marker}' AS (a)) SELECT * FROM {ds} WHERE country IN "
    "(SELECT a FROM c)",
    "SELECT * FROM {ds} d, LATERAL (SELECT TRANSFORM(d.country) USING 'touch {marker}' AS (a))",
]
"""Script transforms hidden where a plan's JSON shows null: each ran a shell command once."""


@pytest.mark.parametrize("hidden", HIDDEN_TRANSFORMS, ids=["window-definition", "scalar-subquery", "cte",
                                                           "lateral-subquery"])
def test_a_hidden_script_transform_is_refused_and_runs_nothing(spark, engine, published, tmp_path, hidden):
    """The bypass that once ran a shell command: TRANSFORM ... USING hidden where a plan's JSON shows null."""
    marker = tmp_path / "ran"
    with pytest.raises(QueryError) as caught:
        execute_sql(spark, engine, hidden.format(ds=f'"{published[0]}"', marker=marker))
    assert caught.value.error_class == "NOT_READ_ONLY" and "ScriptTransformation" in caught.value.message
    assert not marker.exists()


def test_explain_plan_for_names_the_segments_its_time_filter_reads_and_runs_nothing(spark, engine, published,
                                                                                      tmp_path):
    datasource, _table = published
    visible = visible_segments(engine, datasource)
    [[plan, resources, attributes]] = run_sql(
        spark, engine, f"explain plan for SELECT COUNT(*) FROM \"{datasource}\" "
                       "WHERE __time >= TIMESTAMP '2026-11-01 01:00:00'", "array")
    read = json.loads(plan)["datasources"][datasource]
    later = [s for s in visible if TimeRange(T0 + HOUR).reads(s)]  # by the __time range each segment records
    assert read == {"segments": len(visible), "segmentsRead": len(later), "bytesRead": sum(s.size_bytes for s in later)}
    assert later and "count(" in json.loads(plan)["sparkSql"].lower()
    assert json.loads(resources) == [{"name": datasource, "type": "DATASOURCE"}]
    assert json.loads(attributes)["statementType"] == "SELECT"
    marker = tmp_path / "ran"
    with pytest.raises(QueryError) as caught:  # explained or not, a query passes the same checks
        execute_sql(spark, engine, "EXPLAIN PLAN FOR " + HIDDEN_TRANSFORMS[0].format(ds=f'"{datasource}"',
                                                                                   marker=marker))
    assert caught.value.error_class == "NOT_READ_ONLY" and not marker.exists()


def test_the_analyzed_plan_check_refuses_what_the_parse_check_cannot_name(spark):
    """Plans analyzed where reflect and a Python UDF resolve (the shared session, not the query session)."""
    from pyspark.sql.functions import udf

    from overlord.query.sandbox import PlanWalker, check_analyzed

    spark.udf.register("plus_one", udf(lambda x: x + 1, "long"))
    walker = PlanWalker(spark.sparkContext._jvm)
    for sql, found in [("SELECT reflect('java.util.UUID', 'randomUUID')", "CallMethodViaReflection"),
                       ("SELECT plus_one(id) FROM range(3)", "PythonUDF"),
                       ("SELECT * FROM range(3) WHERE id IN (SELECT try_reflect('java.util.UUID', 'randomUUID'))",
                        "Reflect")]:
        with pytest.raises(QueryError) as caught:
            check_analyzed(walker, spark.sql(sql)._jdf.queryExecution().analyzed(), views=())
        assert found in caught.value.message and caught.value.error_class == "FUNCTION_NOT_ALLOWED"
    check_analyzed(walker, spark.sql("SELECT id * 2 FROM range(3)")._jdf.queryExecution().analyzed(), views=())


@pytest.mark.parametrize("sql", [
    "SELECT repeat('ab', 3) AS r, sequence(1, 5) AS s, lpad('x', 4, '-') AS p",
    "SELECT country, sum(value_sum) OVER w FROM {ds} WINDOW w AS (PARTITION BY country)",
    "SELECT u FROM {ds} LATERAL VIEW explode(array(1, 2)) t AS u",
    "SELECT * FROM range(3)",
])
def test_ordinary_queries_pass_the_sandbox(spark, engine, published, sql):
    assert execute_sql(spark, engine, sql.format(ds=f'"{published[0]}"')).table.num_rows > 0


def test_query_command_line_prints_a_table(stack, spark, published, monkeypatch, capsys):
    """``overlord query --local`` in-process (the session's Spark is reused): a table, or the engine's message."""
    datasource, table = published
    for key, value in stack.as_env().items():
        monkeypatch.setenv(key, value)
    good = _parser().parse_args(["query", "--local", f'SELECT country, SUM("count") AS events FROM "{datasource}" '
                                 "GROUP BY country ORDER BY country LIMIT 2"])
    bad = _parser().parse_args(["query", "--local", "SELECT * FROM nowhere"])

    assert good.func(good) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["country", "events"] and lines[-1] == "(2 rows)"
    assert [line.split()[0] for line in lines[2:4]] == sorted({r["country"] for r in table.to_pylist()})[:2]
    assert bad.func(bad) == 2
    err = capsys.readouterr().err
    assert err.startswith("query failed: [TABLE_OR_VIEW_NOT_FOUND]") and "`nowhere`" in err


def test_a_datasource_without_used_segments_is_no_longer_queryable(spark, engine, deep_storage):
    datasource = f"gone-{uuid.uuid4().hex[:8]}"
    publish_random(engine, deep_storage, datasource, random.Random(12), T0, 10)
    assert run_sql(spark, engine, f'SELECT COUNT(*) AS n FROM "{datasource}"') == [{"n": 10}]
    with engine.begin() as conn:
        conn.execute(segment_status.update().where(segment_status.c.datasource == datasource).values(used=False))

    with pytest.raises(QueryError, match="TABLE_OR_VIEW_NOT_FOUND"):
        run_sql(spark, engine, f'SELECT COUNT(*) AS n FROM "{datasource}"')


def test_results_are_capped_and_sql_outer_limit_cuts_them(spark, engine, published):
    datasource, table = published
    sql = f'SELECT __time, country FROM "{datasource}" ORDER BY __time, country'
    expected = sorted((r["__time"], r["country"]) for r in table.to_pylist())
    n = len(expected)

    assert len(run_sql(spark, engine, sql, "array", limits=QueryLimits(max_rows=n))) == n  # exactly at the cap is fine
    with pytest.raises(QueryError, match=f"more than {n - 1:,} rows") as refused:
        run_sql(spark, engine, sql, limits=QueryLimits(max_rows=n - 1))
    assert refused.value.error_class == "RESULT_TOO_LARGE"

    def outer(limit):
        return SqlQuery.model_validate({"query": sql, "resultFormat": "array", "context": {"sqlOuterLimit": limit}})

    first = outer(5).run(spark, engine, QueryLimits(max_rows=5))  # an outer limit cuts the result to its first rows
    assert [row[1] for row in first] == [country for _, country in expected[:5]]
    with pytest.raises(QueryError, match="more than 4 rows"):  # and never lifts the cap
        outer(5).run(spark, engine, QueryLimits(max_rows=4))
    for bad in (-1, "-1", "five", 2.5, True):
        with pytest.raises(QueryError, match="context.sqlOuterLimit"):
            outer(bad).run(spark, engine)
    assert outer("5").run(spark, engine, QueryLimits(max_rows=5)) == first  # a number in a text, as Druid reads it


def test_results_past_the_byte_limit_and_texts_past_the_length_limit_are_refused(spark, engine, published):
    sql = f'SELECT country, __time FROM "{published[0]}"'
    with pytest.raises(QueryError, match="OVERLORD_QUERY_MAX_BYTES") as refused:
        execute_sql(spark, engine, sql, limits=QueryLimits(max_bytes=100))
    assert refused.value.error_class == "RESULT_TOO_LARGE"
    with pytest.raises(QueryError, match="OVERLORD_QUERY_MAX_LENGTH") as refused:
        execute_sql(spark, engine, sql, limits=QueryLimits(max_length=len(sql) - 1))
    assert refused.value.error_class == "QUERY_TOO_LONG"


def test_a_query_past_its_timeout_is_cancelled_with_its_jobs(spark, engine):
    """10^12 pairs would take hours; the timeout cancels the query's jobs within seconds."""
    started = time.monotonic()
    with pytest.raises(QueryError, match="context.timeout") as refused:
        SqlQuery.model_validate({"query": "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b "
                                          "WHERE a.id * 7 + b.id = 3", "context": {"timeout": 1500}}
                                ).run(spark, engine)
    assert refused.value.error_class == "QUERY_TIMEOUT" and time.monotonic() - started < 60
    tracker = spark.sparkContext.statusTracker()
    wait_until(lambda: not tracker.getActiveJobsIds(), "the cancelled jobs to end", 30)
    for bad in (0, -5, "10", 10**12):
        with pytest.raises(QueryError, match="context.timeout"):
            SqlQuery.model_validate({"query": "SELECT 1", "context": {"timeout": bad}}).run(spark, engine)


def test_the_fsspec_segment_source_reads_every_file_and_fills_missing_columns(spark, tmp_path):
    """The reader used for object stores, here on file:// URLs: all rows, in as many partitions as
    Spark has cores, and nulls for a column the first file has and a later one lacks.
    """
    from overlord.query.segment_source import read_segments

    paths = []
    for i in range(5):
        columns = {"__time": pa.array([T0] * 3, pa.timestamp("ms", tz="UTC")), "country": ["DE", "FR", "US"],
                   "count": pa.array([i, i, i], pa.int64())}
        if i != 3:
            columns["city"] = [f"c{i}"] * 3
        pq.write_table(pa.table(columns), tmp_path / f"part-{i}.parquet")
        paths.append(f"file://{tmp_path}/part-{i}.parquet")

    frame = read_segments(spark, paths)
    rows = frame.toArrow().to_pylist()

    assert frame.rdd.getNumPartitions() == min(5, 2 * spark.sparkContext.defaultParallelism)
    assert sorted((r["count"], r["country"], r["city"]) for r in rows) == sorted(
        (i, c, None if i == 3 else f"c{i}") for i in range(5) for c in ("DE", "FR", "US"))
    assert {r["__time"] for r in rows} == {T0}


def test_a_query_reads_the_timeline_once_in_one_transaction(spark, engine, published):
    """Every fact a query takes from the metadata store (datasources, visible files, column kinds) comes from
    one read: answers cannot mix two states of the timeline, and a query costs one trip to PostgreSQL.
    """
    import sqlalchemy as sa

    datasource, table = published
    checkouts: list[object] = []

    def count(*_args: object) -> None:
        checkouts.append(_args)

    sa.event.listen(engine, "checkout", count)
    try:
        rows = run_sql(spark, engine, f'SELECT SUM("count") AS n FROM "{datasource}"')
    finally:
        sa.event.remove(engine, "checkout", count)
    assert rows == [{"n": sum(table.column("count").to_pylist())}]
    assert len(checkouts) == 1, f"{len(checkouts)} connections for one query"
