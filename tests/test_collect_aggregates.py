"""Druid's ARRAY_AGG, STRING_AGG and LISTAGG on real segments and Spark, bounded by the rows a query reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from overlord.query.engine import run_sql
from overlord.query.query_errors import QueryError
from tests.test_timeline import publish_segments, write_segment

FOO_DIM1 = ["", "10.1", "2", "1", "def", "abc"]
"""Druid's ``foo`` test table's ``dim1`` and ``l1`` (``numfoo``), one row a day from 2000-01-01."""
FOO_L1 = [7, 325323, 0, None, None, None]
FOO_D1 = [1.0, 1.7, 0.0, None, None, None]
"""``numfoo``'s ``d1`` and ``f1`` (a FLOAT column)."""
FOO_F1 = [1.0, 0.1, 0.0, None, None, None]


def publish_foo(engine, root: str, datasource: str) -> None:
    start = datetime(2000, 1, 1, tzinfo=UTC)
    times = [start + timedelta(days=d) for d in (0, 1, 2, 365, 366, 367)]
    table = pa.table({"__time": pa.array(times, pa.timestamp("ms", tz="UTC")), "dim1": FOO_DIM1,
                      "l1": pa.array(FOO_L1, pa.int64()), "d1": pa.array(FOO_D1, pa.float64()),
                      "f1": pa.array(FOO_F1, pa.float32())})
    publish_segments(engine, datasource, write_segment(root, datasource, start, table, end=start + timedelta(days=400)))


def test_string_agg_as_druid_answers(spark, engine, datasource, tmp_path):
    """``CalciteQueryTest#testStringAgg``: rows in time order; DISTINCT sorted; no rows give null."""
    publish_foo(engine, str(tmp_path), datasource)
    got = run_sql(spark, engine, "SELECT STRING_AGG(dim1, ','), STRING_AGG(DISTINCT dim1, ','), "
                                 "STRING_AGG(DISTINCT dim1, ',') FILTER(WHERE dim1 = 'shazbot'), LISTAGG(dim1, '|') "
                                 f'FROM "{datasource}" WHERE dim1 IS NOT NULL', "array")
    assert got == [[",10.1,2,1,def,abc", ",1,10.1,2,abc,def", None, "|10.1|2|1|def|abc"]]


def test_string_agg_and_array_agg_of_numbers_as_druid_answers(spark, engine, datasource, tmp_path):
    """``CalciteQueryTest#testStringAggNumeric``, ``CalciteArraysQueryTest#testArrayAggNumeric`` and
    ``#testArrayAggMaxBytes``: STRING_AGG skips nulls, ARRAY_AGG keeps them (DISTINCT: sorted, null first).
    """
    publish_foo(engine, str(tmp_path), datasource)
    got = run_sql(spark, engine, "SELECT STRING_AGG(l1, ','), STRING_AGG(DISTINCT l1, ',', 128), ARRAY_AGG(l1), "
                                 f'ARRAY_AGG(DISTINCT l1, 128) FROM "{datasource}"', "array")
    assert got == [["7,325323,0", "0,325323,7", [7, 325323, 0, None, None, None], [None, 0, 7, 325323]]]


@pytest.mark.parametrize("call", [
    "STRING_AGG(DISTINCT dim1, CONCAT('|', dim1))", "STRING_AGG(dim1, ',' ORDER BY dim1)",
    "ARRAY_AGG(dim1 ORDER BY dim1 DESC)", "LISTAGG(dim1, ',') WITHIN GROUP (ORDER BY dim1)"])
def test_a_separator_that_is_no_constant_or_an_order_is_refused(spark, engine, datasource, tmp_path, call):
    """``CalciteQueryTest#testStringAggExpressionNonConstantSeparator``; Druid's documentation: ``ORDER BY``
    within ``STRING_AGG``/``ARRAY_AGG`` is not supported.
    """
    publish_foo(engine, str(tmp_path), datasource)
    with pytest.raises(QueryError) as caught:
        run_sql(spark, engine, f'SELECT {call} FROM "{datasource}"')
    assert caught.value.error_class == "UNSUPPORTED_DRUID_SQL", caught.value.message


def test_a_collection_the_rows_read_cannot_bound_is_refused(spark, engine, datasource, tmp_path):
    """The sandbox bounds a collecting aggregate by the rows it may read (the files' row counts, a join's
    product): over a generated range, or a join that multiplies six rows past the value limit, it is a 400.
    """
    publish_foo(engine, str(tmp_path), datasource)
    ds = f'"{datasource}"'
    for sql in ("SELECT size(collect_list(id)) FROM range(100000000)",
                f"SELECT ARRAY_AGG(a.dim1, 100000) FROM {ds} a, {ds} b, {ds} c, {ds} d, {ds} e, {ds} f, {ds} g, "
                f"{ds} h, {ds} i, {ds} j"):
        with pytest.raises(QueryError) as caught:
            run_sql(spark, engine, sql)
        assert caught.value.error_class == "VALUE_TOO_LARGE", caught.value.message


def test_a_collection_over_a_window_or_a_cte_is_bounded_by_the_rows_it_reads(spark, engine, datasource, tmp_path):
    """Spark's ``collect_list`` in a window, and over a CTE of the datasource, is counted like ARRAY_AGG."""
    publish_foo(engine, str(tmp_path), datasource)
    ds = f'"{datasource}"'
    window = run_sql(spark, engine, f"SELECT size(collect_list(dim1) OVER (ORDER BY __time)) AS n FROM {ds}", "array")
    assert sorted(row[0] for row in window) == [1, 2, 3, 4, 5, 6]
    cte = run_sql(spark, engine, f"WITH t AS (SELECT dim1 FROM {ds}) SELECT ARRAY_AGG(DISTINCT dim1) FROM t", "array")
    assert cte == [[["", "1", "10.1", "2", "abc", "def"]]]


def test_time_is_collected_as_epoch_milliseconds(spark, engine, datasource, tmp_path):
    """Druid's quidem ``string_agg_timestamp_test001.01`` ``A03`` and ``array_agg_misc_test002``: ``__time`` in
    STRING_AGG and ARRAY_AGG is its epoch milliseconds (Druid's long), not a date's text.
    """
    publish_foo(engine, str(tmp_path), datasource)
    got = run_sql(spark, engine, "SELECT STRING_AGG(__time, '|'), ARRAY_AGG(__time), STRING_AGG(DISTINCT __time, ',') "
                                 f"FROM \"{datasource}\" WHERE dim1 IN ('', '10.1')", "array")
    assert got == [["946684800000|946771200000", [946684800000, 946771200000], "946684800000,946771200000"]]


def test_a_number_separator_is_its_text(spark, engine, datasource, tmp_path):
    """Druid's quidem ``string_agg_misc_test003`` ``A01``: ``STRING_AGG(x, 100000)`` separates with ``100000``."""
    publish_foo(engine, str(tmp_path), datasource)
    got = run_sql(spark, engine, f"SELECT STRING_AGG(l1, 100000) FROM \"{datasource}\"", "array")
    assert got == [["71000003253231000000"]]


@pytest.mark.parametrize(("call", "size"), [
    ("ARRAY_AGG(l1, {})", 35), ("ARRAY_AGG(d1, {})", 35), ("ARRAY_AGG(__time, {})", 59),
    ("ARRAY_AGG(dim1, {})", 41), ("STRING_AGG(dim1, ',', {})", 41), ("STRING_AGG(l1, ',', {})", 25),
    ("ARRAY_AGG(DISTINCT l1, {})", 33)])
def test_a_collection_past_its_max_bytes_fails_as_in_druid(spark, engine, datasource, tmp_path, call, size):
    """Druid's size estimate (``ExpressionLambdaAggregatorTest#testEstimateLongArrayTooBig``: four longs are 41
    bytes; strings 5 + 4 per element + their UTF-8 bytes); past ``maxBytes`` the query fails (quidem
    ``array_agg_long_test001`` ``A30``: "size"), at it the query answers.
    """
    publish_foo(engine, str(tmp_path), datasource)
    run_sql(spark, engine, f'SELECT {call.format(size)} FROM "{datasource}"')
    with pytest.raises(QueryError) as caught:
        run_sql(spark, engine, f'SELECT {call.format(size - 1)} FROM "{datasource}"')
    assert caught.value.status == 400
    assert f"size is larger than max [{size - 1}]" in caught.value.message, caught.value.message


def test_the_default_max_bytes_is_1024(spark, engine, datasource, tmp_path):
    """Druid's quidem ``array_agg_long_test001`` ``A30``: a collection past 1024 bytes without ``maxBytes`` fails."""
    publish_foo(engine, str(tmp_path), datasource)
    ds = f'"{datasource}"'
    with pytest.raises(QueryError) as caught:
        run_sql(spark, engine, f"SELECT ARRAY_AGG(a.l1) FROM {ds} a, {ds} b, {ds} c")
    assert "is larger than max [1024]" in caught.value.message, caught.value.message


def test_array_functions_over_collected_arrays_as_druid_answers(spark, engine, datasource, tmp_path):
    """Druid's quidem ``array_agg_*_test001`` (``A08``-``A16``, ``A29``) and ``array_agg_misc_test002``: an array
    with nulls that lacks a value does not contain it (false, not null); a decimal literal meets a DOUBLE or
    FLOAT array as a double; an alias of a collected array is that array; a slice past the end is null.
    """
    publish_foo(engine, str(tmp_path), datasource)
    ds = f'"{datasource}"'
    got = run_sql(spark, engine, "SELECT ARRAY_CONTAINS(ARRAY_AGG(l1), 3), ARRAY_CONTAINS(ARRAY_AGG(l1), ARRAY[7, 3]), "
                                 "ARRAY_OVERLAP(ARRAY_AGG(l1), ARRAY[3, 4]), ARRAY_CONTAINS(ARRAY_AGG(d1), 1.7), "
                                 "ARRAY_OVERLAP(ARRAY_AGG(d1), ARRAY[1.7, 3.3]), ARRAY_OFFSET_OF(ARRAY_AGG(f1), 0.1), "
                                 "ARRAY_ORDINAL_OF(ARRAY_AGG(f1), 1.0), ARRAY_SLICE(ARRAY_AGG(l1), 100, 101), "
                                 f"ARRAY_SLICE(ARRAY_AGG(l1), 1, 2) FROM {ds}", "array")
    assert got == [[False, False, False, True, True, None, 1, None, [325323]]]
    aliased = run_sql(spark, engine, f"SELECT count(*) FROM (SELECT ARRAY_AGG(d1) AS c3, ARRAY_AGG(dim1) AS c1 "
                                     f"FROM {ds}) WHERE (NOT ARRAY_CONTAINS(c3, 99999) OR c3 IS NULL) "
                                     "AND NOT ARRAY_CONTAINS(c1, '99999')", "array")
    assert aliased == [[1]]
