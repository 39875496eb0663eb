"""Sketch aggregators: built at ingestion, merged at rollup and compaction, answered by Druid's SQL functions."""

from __future__ import annotations

import json
import math
from typing import Any

import datasketches as ds
import pytest

from indexing_task.compaction_job import compact
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from overlord.dev.sample_data import produce
from overlord.query.engine import execute_sql
from overlord.query.native import run_native
from overlord.query.query_errors import QueryError
from overlord.supervisor.task_ranges import index_once
from specs import SpecError, check_update, load_supervisor_spec
from specs.sketch_aggregators import Sketch
from tests.helpers import example_json, published_table, settings_for

COUNTRIES = ("NL", "DE", "FR")
USERS_PER_COUNTRY = {"NL": 20_000, "DE": 8_000, "FR": 1_500}
"""Distinct users per country: beyond theta's exact mode (16384 entries) and within it."""


def sketch_spec(datasource: str = "sketches", topic: str = "sketches", metrics: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    raw = example_json("sketches")
    raw["spec"]["dataSchema"]["dataSource"] = datasource
    raw["spec"]["ioConfig"]["topic"] = topic
    raw["spec"]["dataSchema"]["metricsSpec"] += metrics if metrics is not None else [
        {"type": "HLLSketchBuild", "name": "users_hll", "fieldName": "user"},
        {"type": "hyperUnique", "name": "users_hu", "fieldName": "user"},
        {"type": "cardinality", "name": "user_pages", "fields": ["user", "page"], "byRow": True},
        {"type": "quantilesDoublesSketch", "name": "latency", "fieldName": "ms"},
        {"type": "filtered", "filter": {"type": "selector", "dimension": "page", "value": "home"},
         "aggregator": {"type": "thetaSketch", "name": "home_users", "fieldName": "user", "size": 1024}}]
    return raw


def events(part: int, parts: int) -> list[dict[str, Any]]:
    """Part ``part`` of ``parts`` of the events: every user of a country visits both pages, some twice."""
    out = []
    for country, users in USERS_PER_COUNTRY.items():
        for user in range(part, users, parts):
            for page in ("home", "cart") if user % 3 else ("home", "cart", "home"):
                out.append({"ts": f"2024-05-01T10:{user % 60:02d}:00Z", "country": country, "user": f"u{user}",
                            "page": page, "ms": user % 1000})
    return out


def within(estimate: float, exact: int, relative_error: float) -> bool:
    """Whether a distinct-count estimate is within 3 standard errors of the exact count."""
    return abs(estimate - exact) <= 3 * relative_error * exact


def median_within_rank_error(median: float, values: list[float]) -> bool:
    """Whether ``median``'s rank among ``values`` is 0.5 within the rank error of the KLL sketch stored (k 192)."""
    error = ds.kll_doubles_sketch.get_normalized_rank_error(192, False)
    below, at_most = (sum(v < median for v in values) / len(values), sum(v <= median for v in values) / len(values))
    return below - error <= 0.5 <= at_most + error


THETA, HLL_12, HLL_11 = 1 / math.sqrt(16384), 1.04 / math.sqrt(2**12), 1.04 / math.sqrt(2**11)
"""Documented relative standard errors: theta of 16384 entries, HLL of lgK 12, hyperUnique (2^11 buckets)."""


@pytest.mark.parametrize(("aggregator", "sketch"), [
    ({"type": "thetaSketch", "fieldName": "u"}, "theta:16384"),
    ({"type": "thetaSketch", "fieldName": "u", "size": 1024, "shouldFinalize": False}, "theta:1024"),
    ({"type": "HLLSketchBuild", "fieldName": "u"}, "hll:12:HLL_4"),
    ({"type": "HLLSketchBuild", "fieldName": "u", "lgK": 16, "tgtHllType": "HLL_8", "round": True}, "hll:16:HLL_8"),
    ({"type": "hyperUnique", "fieldName": "u"}, "hll:11:HLL_4:counts_empty"),
    ({"type": "cardinality", "fields": ["u", "v"], "byRow": True}, "hll:11:HLL_4:counts_empty"),
    ({"type": "quantilesDoublesSketch", "fieldName": "u"}, "kll:192"),
    ({"type": "quantilesDoublesSketch", "fieldName": "u", "k": 1024}, "kll:1536"),
])
def test_each_druid_sketch_aggregator_stores_a_datasketches_sketch(aggregator, sketch):
    spec = load_supervisor_spec(sketch_spec(metrics=[{"name": "s", **aggregator}]))
    assert str(spec.spec.data_schema.metrics_spec[-1].sketch) == sketch


@pytest.mark.parametrize(("aggregator", "path", "message"), [
    ({"type": "HLLSketchBuild", "fieldName": "u", "size": 1024}, "size", "only a thetaSketch aggregator takes size"),
    ({"type": "thetaSketch", "fieldName": "u", "size": 1000}, "size", "must be a power of 2 from 16"),
    ({"type": "HLLSketchBuild", "fieldName": "u", "lgK": 22}, "lgK", "must be from 4 to 21"),
    ({"type": "quantilesDoublesSketch", "fieldName": "u", "k": 100}, "k", "must be a power of 2 from 2"),
    ({"type": "cardinality", "fieldName": "u"}, "fieldName", "takes no fieldName (it takes fields)"),
    ({"type": "thetaSketch", "fieldName": "u", "fields": ["u"]}, "fields", "only a cardinality aggregator"),
    ({"type": "thetaSketch", "fieldName": "u", "isInputThetaSketch": True}, "isInputThetaSketch", "not supported"),
])
def test_sketch_parameters_out_of_place_or_range_are_refused_naming_them(aggregator, path, message):
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(sketch_spec(metrics=[{"name": "s", **aggregator}]))
    [(found, text)] = refused.value.errors
    assert found == f"spec.dataSchema.metricsSpec[2].{path}" and message in text


def test_a_sketch_metric_cannot_change_its_size_under_the_same_name():
    before = load_supervisor_spec(sketch_spec(metrics=[]))
    resized = sketch_spec(metrics=[])
    resized["spec"]["dataSchema"]["metricsSpec"][1]["size"] = 1024
    with pytest.raises(SpecError) as refused:
        check_update([before], load_supervisor_spec(resized))
    [(path, text)] = refused.value.errors
    assert path == "spec.dataSchema.metricsSpec[1]" and "theta:16384" in text and "theta:1024" in text


def test_each_element_of_a_json_array_is_a_value_as_in_druid():
    spec = load_supervisor_spec(sketch_spec(metrics=[{"type": "cardinality", "name": "c", "fields": ["user", "page"]}]))
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format))
    parsed = rollup.parse([json.dumps({"ts": "2024-05-01T10:00:00Z", "country": "NL", "user": user, "page": page})
                           .encode() for user, page in ((["x", "y", "z", None], "p"), ("x", ["q", 1]))])
    [row] = parsed.rows.to_pylist()
    assert parsed.bad_count == 0 and ds.compact_theta_sketch.deserialize(row["users"]).get_estimate() == 3
    assert round(ds.hll_sketch.deserialize(row["c"]).get_estimate()) == 6  # x, y, z, p, q, 1


def test_hyper_unique_counts_the_empty_string_as_druid_does_and_datasketches_do_not():
    """Druid's own HyperLogLog (hyperUnique, cardinality) hashes '' like any value; DataSketches' HLL skips it."""
    metrics = [{"type": "hyperUnique", "name": "hu", "fieldName": "user"},
               {"type": "HLLSketchBuild", "name": "hll", "fieldName": "user"}]
    spec = load_supervisor_spec(sketch_spec(metrics=metrics))
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format))
    parsed = rollup.parse([json.dumps({"ts": "2024-05-01T10:00:00Z", "country": "NL", "user": user}).encode()
                           for user in ("a", "", "b", None, "")])
    [row] = parsed.rows.to_pylist()
    assert round(ds.hll_sketch.deserialize(row["hu"]).get_estimate()) == 3
    assert round(ds.hll_sketch.deserialize(row["hll"]).get_estimate()) == 2
    assert str(Sketch.parse("hll:11:HLL_4:counts_empty")) == "hll:11:HLL_4:counts_empty"


def test_sketches_built_per_batch_and_merged_estimate_within_their_documented_error():
    spec = load_supervisor_spec(sketch_spec())
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format))
    parts = [rollup.parse([json.dumps(e).encode() for e in events(part, 3)]) for part in range(3)]
    assert all(p.bad_count == 0 for p in parts)
    rows = rollup.merge([p.rows for p in parts]).to_pylist()

    def total(country: str, column: str, family: Any) -> float:
        union = ds.theta_union(14) if family is ds.compact_theta_sketch else ds.hll_union(12)
        for row in rows:
            if row["country"] == country:
                union.update(family.deserialize(row[column]))
        return union.get_result().get_estimate()

    for country, users in USERS_PER_COUNTRY.items():
        assert within(total(country, "users", ds.compact_theta_sketch), users, THETA)
        assert within(total(country, "home_users", ds.compact_theta_sketch), users, 1 / math.sqrt(1024))
        assert within(total(country, "users_hll", ds.hll_sketch), users, HLL_12)
        assert within(total(country, "users_hu", ds.hll_sketch), users, HLL_11)
        assert within(total(country, "user_pages", ds.hll_sketch), 2 * users, HLL_11)  # (user, page) pairs
    latency = ds.kll_doubles_sketch(192)
    for row in rows:
        latency.merge(ds.kll_doubles_sketch.deserialize(row["latency"]))
    all_ms = [e["ms"] for e in events(0, 1)]
    assert latency.n == len(all_ms) and median_within_rank_error(latency.get_quantile(0.5), all_ms)


def test_sketches_ingested_through_the_broker_answer_druid_sql_and_survive_compaction(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(2)
    spec = load_supervisor_spec(sketch_spec(datasource, topic))
    settings = settings_for(stack, deep_storage)
    for part in range(2):  # two tasks: two generations of segments to merge at query time and by compaction
        produce(stack.bootstrap_servers, topic, [json.dumps(e).encode() for e in events(part, 2)], 2)
        report = index_once(spark, engine, settings, spec)
        assert report.outcome.status == "ok" and report.unparseable == 0
    query = f'''SELECT country, APPROX_COUNT_DISTINCT_DS_THETA(users) AS theta,
                       APPROX_COUNT_DISTINCT_DS_HLL(users_hll) AS hll, COUNT(DISTINCT users_hu) AS hu,
                       APPROX_COUNT_DISTINCT(user_pages) AS pairs, APPROX_COUNT_DISTINCT_DS_THETA(home_users) AS home,
                       APPROX_QUANTILE_DS(latency, 0.5) AS median, SUM("count") AS events,
                       APPROX_COUNT_DISTINCT_DS_THETA(users) FILTER (WHERE "count" > 0) AS filtered
                FROM "{datasource}" GROUP BY country ORDER BY country'''

    def answer() -> dict[str, dict[str, Any]]:
        return {row["country"]: row for row in execute_sql(spark, engine, query).table.to_pylist()}

    def assert_within_error(answer: dict[str, dict[str, Any]]) -> None:
        assert answer.keys() == set(COUNTRIES)
        for country, users in USERS_PER_COUNTRY.items():
            row = answer[country]
            assert within(row["theta"], users, THETA) and within(row["home"], users, 1 / math.sqrt(1024))
            assert within(row["hll"], users, HLL_12) and within(row["hu"], users, HLL_11)
            assert within(row["pairs"], 2 * users, HLL_11)
            assert row["events"] == users * 2 + len(range(0, users, 3)) and row["filtered"] == row["theta"]
            assert median_within_rank_error(row["median"], [e["ms"] for e in events(0, 1) if e["country"] == country])

    before = answer()
    assert_within_error(before)
    [native] = run_native(spark, engine, {  # as pydruid sends it: aggregators over the sketch columns
        "queryType": "timeseries", "dataSource": datasource, "granularity": "all", "intervals": ["2024-05-01/P1D"],
        "filter": {"type": "selector", "dimension": "country", "value": "NL"},
        "aggregations": [{"type": "thetaSketch", "name": "theta", "fieldName": "users"},
                         {"type": "HLLSketchMerge", "name": "hll", "fieldName": "users_hll"},
                         {"type": "hyperUnique", "name": "hu", "fieldName": "users_hu"}]})
    assert native["result"] == {k: before["NL"][k] for k in ("theta", "hll", "hu")}
    types = execute_sql(spark, engine, "SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE "
                        f"TABLE_NAME = '{datasource}' AND COLUMN_NAME IN ('users', 'users_hll', 'users_hu', "
                        "'latency')").table.to_pylist()
    assert {t["COLUMN_NAME"]: t["DATA_TYPE"] for t in types} == {  # as Druid names them
        "users": "COMPLEX<thetaSketch>", "users_hll": "COMPLEX<HLLSketch>", "users_hu": "COMPLEX<hyperUnique>",
        "latency": "COMPLEX<quantilesDoublesSketch>"}
    reports = compact(spark, engine, spec, deep_storage, storage_options=None)
    assert reports and all(r.outcome.ok for r in reports)
    assert len(published_table(engine, datasource)) == len(COUNTRIES) * 60  # one row per country and minute
    after = answer()
    assert_within_error(after)
    for country in COUNTRIES:  # a theta union keeps the smallest hashes, however merged: the same estimate
        assert (after[country]["theta"], after[country]["home"]) == (before[country]["theta"], before[country]["home"])


def test_a_sketch_column_given_to_the_wrong_function_is_refused_naming_the_right_one(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, [json.dumps(e).encode() for e in events(0, 500)], 1)
    index_once(spark, engine, settings_for(stack, deep_storage), load_supervisor_spec(sketch_spec(datasource, topic)))
    for call, message in [
        ("APPROX_COUNT_DISTINCT_DS_HLL(users)", "a column of THETA sketches: use APPROX_COUNT_DISTINCT_DS_THETA"),
        ("APPROX_COUNT_DISTINCT_DS_THETA(users_hll)", "a column of HLL sketches: use APPROX_COUNT_DISTINCT_DS_HLL"),
        ("APPROX_QUANTILE_DS(users, 0.5)", "a column of THETA sketches"),
        ("COUNT(DISTINCT latency)", "a column of KLL sketches: use APPROX_QUANTILE_DS"),
        ("APPROX_COUNT_DISTINCT_DS_THETA(u) FROM (SELECT users AS u", "over stored sketches"),  # an alias hides it
        ("COUNT(DISTINCT u) FROM (SELECT users_hll AS u", "over stored sketches"),
        ("MIN(latency)", "over stored sketches"),
        ("HLL_SKETCH_ESTIMATE(DS_HLL(users_hll))", "a column of HLL sketches: use APPROX_COUNT_DISTINCT_DS_HLL"),
        ("HLL_SKETCH_ESTIMATE(DS_HLL(u)) FROM (SELECT users_hll AS u", "over stored sketches"),
        ("THETA_SKETCH_ESTIMATE(DS_THETA(u)) FROM (SELECT users AS u", "over stored sketches"),
    ]:
        with pytest.raises(QueryError, match=message):
            execute_sql(spark, engine, f'SELECT {call} FROM "{datasource}"' + (")" if "(SELECT" in call else ""))


def test_a_merge_of_only_null_sketches_is_null_and_of_some_null_the_union_of_the_others(
        stack, engine, spark, make_topic, datasource, deep_storage):
    """Rows from before a spec added sketches hold NULL, and keep it through compaction (as in Druid)."""
    topic = make_topic(1)
    settings = settings_for(stack, deep_storage)
    raw = sketch_spec(datasource, topic, metrics=[])
    raw["spec"]["dataSchema"]["metricsSpec"] = [{"type": "count", "name": "count"}]
    before_sketches = load_supervisor_spec(raw)
    with_sketches = load_supervisor_spec(sketch_spec(datasource, topic, metrics=[
        {"type": "HLLSketchBuild", "name": "users_hll", "fieldName": "user"},
        {"type": "quantilesDoublesSketch", "name": "latency", "fieldName": "ms"}]))
    sketches = ("users", "users_hll", "latency")
    event = {"ts": "2024-05-01T10:00:00Z", "user": "u1", "ms": 5}
    for spec, countries in ((before_sketches, ("NL", "DE")), (before_sketches, ("NL", "DE")), (with_sketches, ("DE",))):
        produce(stack.bootstrap_servers, topic, [json.dumps({**event, "country": c}).encode() for c in countries], 1)
        assert index_once(spark, engine, settings, spec).outcome.status == "ok"

    def nulls() -> dict[str, dict[str, bool]]:
        rows = published_table(engine, datasource).to_pylist()
        return {c: {s: all(r.get(s) is None for r in rows if r["country"] == c) for s in sketches}
                for c in ("NL", "DE")}

    assert nulls() == {"NL": dict.fromkeys(sketches, True), "DE": dict.fromkeys(sketches, False)}
    reports = compact(spark, engine, with_sketches, deep_storage)
    assert reports and all(r.outcome.ok for r in reports)
    rows = {r["country"]: r for r in published_table(engine, datasource).to_pylist()}
    assert {c: {s: rows[c][s] is None for s in sketches} for c in rows} == {
        "NL": dict.fromkeys(sketches, True), "DE": dict.fromkeys(sketches, False)}, "a merge of NULLs is NULL"
    assert ds.compact_theta_sketch.deserialize(rows["DE"]["users"]).get_estimate() == 1.0  # the non-NULL one
    assert ds.hll_sketch.deserialize(rows["DE"]["users_hll"]).get_estimate() == pytest.approx(1.0)
    assert ds.kll_doubles_sketch.deserialize(rows["DE"]["latency"]).n == 1
    answer = execute_sql(spark, engine, f'SELECT country, COUNT(*) AS n FROM "{datasource}" WHERE users IS NULL '
                                        "GROUP BY country").table.to_pylist()
    assert answer == [{"country": "NL", "n": 1}], answer
