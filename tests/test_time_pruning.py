"""Time pruning: a SQL query reads only the segments its ``__time`` filter can match.

Unit tests derive the ranges from query texts (sqlglot only). On real Spark, PostgreSQL and
Parquet: a one-hour query reads only that hour's files (counted from Spark's own scan
metrics), and every filter gives exactly the result of the same query that cannot be pruned.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import s3fs

from overlord.query.druid_sql import translate
from overlord.query.engine import run_sql
from overlord.query.time_pruning import TimeRange, time_ranges
from segment_store.records import SegmentRecord
from tests.test_timeline import HOUR, T0, publish_segments, random_rows, write_segment

TICK = timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def at(hour: int, minute: int = 0) -> datetime:
    return T0 + timedelta(hours=hour, minutes=minute)


def ts(hour: int, minute: int = 0) -> str:
    return f"TIMESTAMP '{at(hour, minute):%Y-%m-%d %H:%M:%S}'"


HOUR_5 = f"__time >= {ts(5)} AND __time < {ts(6)}"


# --- deriving the ranges (pure sqlglot) ----------------------------------------------------------


@pytest.mark.parametrize("sql, references, expected", [
    (f"SELECT * FROM ds WHERE {HOUR_5}", {"ds": 1}, TimeRange(at(5), at(6))),
    (f'SELECT * FROM "DS" WHERE {ts(5)} < "__time" AND __TIME <= {ts(6)}', {"ds": 1},
     TimeRange(at(5) + TICK, at(6) + TICK)),
    (f"SELECT * FROM ds WHERE __time BETWEEN {ts(5)} AND {ts(6)}", {"ds": 1}, TimeRange(at(5), at(6) + TICK)),
    (f"SELECT * FROM ds WHERE __time = {ts(5)}", {"ds": 1}, TimeRange(at(5), at(5) + TICK)),
    (f"SELECT * FROM ds WHERE (country = 'DE' AND (__time >= {ts(5)})) AND __time < {ts(6)} AND device IN ('a')",
     {"ds": 1}, TimeRange(at(5), at(6))),
    (f"SELECT * FROM ds WHERE __time >= ? AND __time < {ts(6)}", {"ds": 1}, TimeRange(None, at(6))),
    (f"SELECT * FROM ds WHERE __time >= {ts(6)} AND __time < {ts(5)}", {"ds": 1}, TimeRange(at(6), at(5))),
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP '2026-11-01 07:00:00+02:00' "
     "AND __time < CAST('2026-11-01T06:00:00.000Z' AS TIMESTAMP)", {"ds": 1}, TimeRange(at(5), at(6))),
    (f"SELECT * FROM ds AS t WHERE t.__time >= {ts(5)} AND T.__time < {ts(6)}", {"ds": 1}, TimeRange(at(5), at(6))),
    (f"SELECT * FROM (SELECT * FROM ds WHERE {HOUR_5}) t WHERE country = 'DE'", {"ds": 1}, TimeRange(at(5), at(6))),
    (f"SELECT (SELECT COUNT(*) FROM ds WHERE {HOUR_5}) AS n", {"ds": 1}, TimeRange(at(5), at(6))),
    (f"WITH x AS (SELECT * FROM ds WHERE {HOUR_5}) SELECT * FROM x", {"ds": 1, "x": 1}, TimeRange(at(5), at(6))),
    (f"SELECT * FROM (SELECT country FROM ds WHERE {HOUR_5}) a JOIN (SELECT country FROM ds WHERE "
     f"__time >= {ts(7)} AND __time < {ts(8)}) b ON a.country = b.country", {"ds": 2}, TimeRange(at(5), at(8))),
    (f"SELECT COUNT(*) FROM ds WHERE __time < {ts(1)} UNION ALL SELECT COUNT(*) FROM ds WHERE __time = {ts(3)}",
     {"ds": 2}, TimeRange(None, at(3) + TICK)),
    # Spark reads backslash escapes in strings: the filter after 'it\'s' is still a filter
    (f"SELECT * FROM ds WHERE country = 'it\\'s' AND {HOUR_5}", {"ds": 1}, TimeRange(at(5), at(6))),
])
def test_time_filters_bound_their_datasource(sql, references, expected):
    assert time_ranges(sql, references) == {"ds": expected}


def test_druid_time_functions_of_constants_bound_it_too():
    millis = int(at(6).timestamp() * 1000)
    sql = translate(f"SELECT COUNT(*) FROM druid.ds WHERE __time >= TIME_PARSE('2026-11-01T05:00:00Z') "
                    f"AND __time < MILLIS_TO_TIMESTAMP({millis})").sql
    assert time_ranges(sql, {"ds": 1}) == {"ds": TimeRange(at(5), at(6))}
    parsed_with_a_pattern = translate("SELECT * FROM druid.ds WHERE __time >= "
                                      "TIME_PARSE('2026/11/01', 'yyyy/MM/dd')").sql
    assert time_ranges(parsed_with_a_pattern, {"ds": 1}) == {}


@pytest.mark.parametrize("sql, references", [
    ("SELECT * FROM ds", {"ds": 1}),
    (f"SELECT * FROM ds WHERE __time < {ts(1)} OR __time >= {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM ds WHERE {HOUR_5} OR country = 'DE'", {"ds": 1}),
    (f"SELECT * FROM ds WHERE NOT __time BETWEEN {ts(5)} AND {ts(6)}", {"ds": 1}),
    (f"SELECT * FROM ds WHERE NOT (__time < {ts(5)})", {"ds": 1}),
    (f"SELECT * FROM ds WHERE __time IN ({ts(5)}, {ts(6)})", {"ds": 1}),
    (f"SELECT * FROM ds WHERE date_trunc('HOUR', __time) = {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM ds WHERE __time + INTERVAL 1 HOUR >= {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM ds WHERE __time >= {ts(5)} - INTERVAL 1 HOUR", {"ds": 1}),
    ("SELECT * FROM ds WHERE __time >= ?", {"ds": 1}),
    ("SELECT * FROM ds WHERE __time >= '2026-11-01 05:00:00'", {"ds": 1}),  # a string, not a timestamp
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP_NTZ '2026-11-01 05:00:00'", {"ds": 1}),
    ("SELECT * FROM ds WHERE __time >= DATE '2026-11-01'", {"ds": 1}),
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP '2026-11-01 05:00+02:00'", {"ds": 1}),  # Spark refuses it
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP '2026-11-01 05:00:00+19:00'", {"ds": 1}),  # so does it
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP '2026-11-01 05:00:00.1234567'", {"ds": 1}),  # Spark truncates
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP ' 2026-11-01'", {"ds": 1}),
    ("SELECT * FROM ds WHERE __time >= TIMESTAMP '2026-02-30'", {"ds": 1}),
    (f"SELECT * FROM ds WHERE other.__time >= {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM ds AS t WHERE ds.__time >= {ts(5)}", {"ds": 1}),  # only the alias names it now
    (f"SELECT * FROM ds AS t(a, b, __time) WHERE __time >= {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM ds TABLESAMPLE (10 PERCENT) WHERE __time >= {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM ds LATERAL VIEW explode(array(1)) x AS y WHERE __time >= {ts(5)}", {"ds": 1}),
    (f"SELECT * FROM (SELECT * FROM ds) t WHERE {HOUR_5}", {"ds": 1}),
    (f"SELECT * FROM ds a JOIN ds b ON a.country = b.country WHERE a.__time >= {ts(5)} AND b.__time >= {ts(5)}",
     {"ds": 2}),
    (f"SELECT * FROM ds a, other b WHERE {HOUR_5}", {"ds": 1, "other": 1}),
    (f"SELECT * FROM ds a JOIN (SELECT country FROM ds WHERE {HOUR_5}) b ON a.country = b.country", {"ds": 2}),
    (f"SELECT COUNT(*) FROM ds WHERE {HOUR_5} UNION ALL SELECT COUNT(*) FROM ds", {"ds": 2}),
    (f"SELECT * FROM ds WHERE {HOUR_5} AND country IN (SELECT country FROM ds)", {"ds": 2}),
    (f"WITH ds AS (SELECT * FROM ds WHERE {HOUR_5}) SELECT * FROM ds WHERE {HOUR_5}", {"ds": 2}),
    (f"SELECT * FROM ds WHERE {HOUR_5} UNION ALL SELECT * FROM session.ds", {"ds": 1}),
    (f"SELECT * FROM ds WHERE {HOUR_5}", {"ds": 2}),  # Spark's parser saw another reference
    (f"SELECT * FROM ds WHERE {HOUR_5}", {}),
    (f"SELECT * FROM ds WHERE {HOUR_5} AND", {"ds": 1}),  # sqlglot cannot parse it
    (f"SELECT * FROM ds WHERE {HOUR_5}; SELECT * FROM ds", {"ds": 2}),
    (f"SELECT * FROM ds WHERE __time >= timestamp_millis({'9' * 5000})", {"ds": 1}),  # past Python's int parsing
])
def test_anything_unproven_leaves_the_datasource_unpruned(sql, references):
    assert time_ranges(sql, references) == {}


def segment(descriptor: dict[str, Any]) -> SegmentRecord:
    return SegmentRecord(id="s", datasource="ds", interval_start=at(5), interval_end=at(6), version=1,
                         partition_num=0, path="/nowhere", size_bytes=1, num_rows=1, used=True, created_at=at(0),
                         descriptor=descriptor)


def times(first: datetime, last: datetime) -> dict[str, str]:
    return {"min_time": first.isoformat(), "max_time": last.isoformat()}


def test_a_segment_is_read_when_its_recorded_times_meet_the_range():
    hour_5 = TimeRange(at(5), at(6))
    assert hour_5.reads(segment(times(at(4, 30), at(5))))  # its last row is at the range's start
    assert not hour_5.reads(segment(times(at(4), at(5) - TICK)))
    assert hour_5.reads(segment(times(at(5, 59), at(7))))
    assert not hour_5.reads(segment(times(at(6), at(6, 30))))  # the end is exclusive
    assert TimeRange(None, at(6)).reads(segment(times(at(0), at(1))))
    assert TimeRange(at(6), None).reads(segment(times(at(7), at(8))))
    assert not TimeRange(at(6), at(5)).reads(segment(times(at(5), at(6))))  # an empty range reads nothing


@pytest.mark.parametrize("descriptor", [{}, {"min_time": at(7).isoformat()}, times(at(7), at(8)) | {
    "max_time": "garbage"}, {"min_time": "2026-11-01T07:00:00", "max_time": "2026-11-01T08:00:00"}])
def test_a_segment_that_records_no_times_is_always_read(descriptor):
    """Rows need not lie inside their segment's interval (a queryGranularity coarser than the
    segmentGranularity moves them before it), so the interval proves nothing.
    """
    assert TimeRange(at(5), at(6)).reads(segment(descriptor))


# --- on Spark -------------------------------------------------------------------------------------


FILES_PER_HOUR = (2, 1, 3, 2)
"""Segments of hours 0 to 3, each recording its rows' min and max ``__time`` as ingestion does."""


def _build(engine, root: str) -> str:
    datasource = f"tp-{uuid.uuid4().hex[:8]}"
    rng = random.Random(21)
    for hour, files in enumerate(FILES_PER_HOUR):
        for part in range(files):
            start = at(hour)
            table = pa.concat_tables([random_rows(rng, 1, start, start + timedelta(minutes=1)),  # at the start
                                      random_rows(rng, 30, start, start + HOUR)])
            if (hour, part) == (0, 1):  # a dimension only these rows have (an earlier spec's)
                table = table.append_column("city", pa.array([f"c{i % 3}" for i in range(table.num_rows)]))
            written = write_segment(root, datasource, start, table)
            recorded = times(pc.min(table["__time"]).as_py(), pc.max(table["__time"]).as_py())
            publish_segments(engine, datasource, replace(written, details=recorded))
    return datasource


@pytest.fixture(scope="module")
def local_hours(engine, tmp_path_factory) -> str:
    return _build(engine, str(tmp_path_factory.mktemp("deep")))


@pytest.fixture(scope="module", params=["local", "s3"])
def hours(request, engine) -> tuple[str, bool]:
    """The datasource on a local segment root and on S3 (moto), and whether Spark's scans count files."""
    if request.param == "local":
        return request.getfixturevalue("local_hours"), True
    request.getfixturevalue("s3_endpoint")
    bucket = f"tp-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    return _build(engine, f"s3://{bucket}"), False


def files_read(spark, run: Callable[[], Any]) -> tuple[Any, int]:
    """``run()``'s result and the files its Spark scans read (their ``number of files read`` metrics)."""
    store = spark._jsparkSession.sharedState().statusStore()

    def executions() -> list[Any]:
        listed = store.executionsList()
        return [listed.apply(i) for i in range(listed.length())]

    seen = max((e.executionId() for e in executions()), default=-1)
    result = run()
    deadline = time.monotonic() + 30
    while True:
        new = [e for e in executions() if e.executionId() > seen]
        if new and all(e.completionTime().isDefined() for e in new):
            break
        assert time.monotonic() < deadline, "the query's executions did not end"
        time.sleep(0.05)
    files = 0
    for execution in new:
        values, entries = {}, store.executionMetrics(execution.executionId()).iterator()
        while entries.hasNext():
            entry = entries.next()
            values[entry._1()] = str(entry._2())
        metrics = [execution.metrics().apply(i) for i in range(execution.metrics().length())]
        ids = {m.accumulatorId() for m in metrics if m.name() == "number of files read"}
        files += sum(int(values[i]) for i in ids if i in values)
    return result, files


def test_a_one_hour_query_reads_only_that_hours_files(spark, engine, local_hours):
    sql = (f'SELECT country, SUM("count") AS events FROM "{local_hours}" WHERE __time >= {ts(2)} '
           f"AND __time < {ts(3)} GROUP BY country ORDER BY country")
    unpruned = sql.replace(f'"{local_hours}"', f'(SELECT * FROM "{local_hours}")')

    rows, files = files_read(spark, lambda: run_sql(spark, engine, sql, "array"))
    all_rows, all_files = files_read(spark, lambda: run_sql(spark, engine, unpruned, "array"))

    assert (files, all_files) == (FILES_PER_HOUR[2], sum(FILES_PER_HOUR))
    assert rows == all_rows and rows


def test_a_pruned_view_does_not_outlive_its_query(spark, engine, local_hours):
    """``session.x`` names the view too, but registers nothing: it must not see the last query's files."""
    [[everything]] = run_sql(spark, engine, f'SELECT COUNT(*) FROM "{local_hours}"', "array")
    assert run_sql(spark, engine, f'SELECT COUNT(*) FROM "{local_hours}" WHERE {HOUR_5}', "array") == [[0]]
    assert run_sql(spark, engine, f'SELECT COUNT(*) FROM session."{local_hours}"', "array") == [[everything]]


@pytest.mark.parametrize("sql, parameters, hours_read", [
    (f'SELECT country, SUM("count") AS n FROM {{ds}} WHERE __time >= {ts(2)} AND __time < {ts(3)} '
     "GROUP BY country ORDER BY country", [], (2,)),
    (f"SELECT __time, country, device FROM {{ds}} WHERE __time > {ts(1)} AND __time <= {ts(2)} "
     "ORDER BY 1, 2, 3", [], (1, 2)),
    (f"SELECT COUNT(*) AS n, MIN(__time), MAX(__time) FROM {{ds}} WHERE __time BETWEEN {ts(1, 30)} AND {ts(2)}",
     [], (1, 2)),
    (f'SELECT COUNT(*) AS n, SUM("count") FROM {{ds}} WHERE __time = {ts(3)}', [], (3,)),
    (f"SELECT COUNT(*) AS n FROM {{ds}} WHERE TIME_PARSE('2026-11-01T02:00:00Z') <= __time "
     f"AND __time < MILLIS_TO_TIMESTAMP({int(at(3).timestamp() * 1000)})", [], (2,)),
    (f"SELECT COUNT(*) AS n FROM {{ds}} WHERE __time >= ? AND __time < {ts(2)}", [at(1)], (0, 1)),
    (f"SELECT COUNT(*) AS n FROM {{ds}} WHERE __time < {ts(1)} OR country = 'DE'", [], None),
    (f'SELECT COUNT(*) AS n, SUM("count") AS s FROM {{ds}} WHERE __time >= {ts(9)}', [], ()),
    (f"SELECT country, COUNT(*) AS n FROM {{ds}} WHERE __time >= {ts(3)} AND __time < {ts(1)} GROUP BY country",
     [], ()),
    ("SELECT * FROM {ds} WHERE __time < TIMESTAMP '2020-01-01 00:00:00'", [], ()),
    (f"SELECT * FROM {{ds}} WHERE __time >= {ts(3)} ORDER BY __time, country, device", [], (3,)),
    (f"SELECT city, COUNT(*) AS n FROM {{ds}} WHERE __time >= {ts(2)} GROUP BY city", [], (2, 3)),
    (f"WITH x AS (SELECT * FROM {{ds}} WHERE __time >= {ts(2)} AND __time < {ts(3)}) SELECT COUNT(*) FROM x",
     [], (2,)),
    (f"SELECT COUNT(*) AS n FROM (SELECT country FROM {{ds}} WHERE __time >= {ts(1)} AND __time < {ts(2)}) a "
     f"JOIN (SELECT country FROM {{ds}} WHERE __time >= {ts(2)} AND __time < {ts(3)}) b "
     "ON a.country = b.country", [], (1, 2, 1, 2)),  # two scans of the hull
    (f"SELECT COUNT(*) AS n FROM {{ds}} a JOIN (SELECT country FROM {{ds}} WHERE __time >= {ts(3)}) b "
     f"ON a.country = b.country WHERE a.__time < {ts(1)}", [], None),
    (f'SELECT COUNT(*) AS n FROM {{ds}} WHERE __time >= {ts(3)} UNION ALL SELECT COUNT(*) FROM {{ds}}', [], None),
], ids=["ge-lt", "gt-le", "between", "equal", "druid-functions", "parameter", "or", "nothing",
        "nothing-grouped", "nothing-star", "star", "column-of-other-hours", "cte", "self-join-hull",
        "self-join-unfiltered", "union-unfiltered"])
def test_pruned_results_equal_unpruned_ones(spark, engine, hours, sql: str, parameters: Sequence[Any],
                                            hours_read: tuple[int, ...] | None):
    """``hours_read``: the hours whose files the query's scans read (once per scan); None: not pruned."""
    datasource, counts_files = hours
    pruned = sql.format(ds=f'"{datasource}"')
    unpruned = sql.format(ds=f'(SELECT * FROM "{datasource}")')  # a FROM of a subquery proves nothing

    def run(query: str) -> Callable[[], Any]:
        return lambda: run_sql(spark, engine, query, "array", header=True, parameters=parameters)

    rows, files = files_read(spark, run(pruned))
    expected, all_files = files_read(spark, run(unpruned))

    assert rows[0] == expected[0]  # the same columns, in the same order
    assert sorted(map(repr, rows[1:])) == sorted(map(repr, expected[1:]))  # ties may come in any order
    if counts_files:  # the object-store source reads through fsspec, without Spark's file metrics
        assert all_files >= sum(FILES_PER_HOUR)
        assert files == (all_files if hours_read is None else sum(FILES_PER_HOUR[h] for h in hours_read))


def test_accepted_timestamp_texts_mean_what_spark_reads(spark, engine):
    for text in ("2026-11-01", "2026-1-5", "2026-11-01 05:00:00", "2026-11-01T05:00:00", "2026-11-01 5:7:9",
                 "2026-11-01 05:00", "2026-11-01 05:00:00.5", "2026-11-01 05:00:00.123456", "2026-11-01 05:00:00Z",
                 "2026-11-01T05:00:00.123Z", "2026-11-01 05:00:00+02:00", "2026-11-01 05:00:00-18:00",
                 "2026-11-01 05:00:00+05:30"):
        [[micros]] = run_sql(spark, engine, f"SELECT unix_micros(TIMESTAMP '{text}')", "array")
        derived = time_ranges(f"SELECT * FROM ds WHERE __time >= TIMESTAMP '{text}'", {"ds": 1})
        assert derived == {"ds": TimeRange(EPOCH + timedelta(microseconds=micros), None)}, text


def test_sql_sqlglot_cannot_parse_is_read_unpruned_not_a_server_error():
    """The parser of sqlglot raises IndexError (not its own error) on ``map`` with an odd number of arguments."""
    from overlord.query.local_engine import _parse

    assert time_ranges("SELECT map(1, 2, 3) AS m FROM events WHERE __time >= TIMESTAMP '2026-01-01'",
                       {"events": 1}) == {}
    assert _parse("SELECT map(1, 2, 3) AS m") is None
