"""A spec update that adds a dimension keeps every row visible, to queries and to compaction."""

from __future__ import annotations

import json

from indexing_task.compaction_job import compact
from overlord.dev.sample_data import make_sample_events, produce
from overlord.query.engine import execute_sql
from overlord.supervisor.task_ranges import index_once
from specs import load_supervisor_spec
from tests.helpers import settings_for, spec_json


def test_rows_from_before_and_after_a_new_dimension_are_all_visible(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    settings = settings_for(stack, deep_storage)
    before = spec_json(datasource, topic)
    before["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"] = ["country"]
    after = spec_json(datasource, topic)  # country and device
    first, second = make_sample_events(3_000, seed=11, bad_every=0), make_sample_events(2_000, seed=12, bad_every=0)

    produce(stack.bootstrap_servers, topic, first.records, 1)
    assert index_once(spark, engine, settings, load_supervisor_spec(before)).outcome.ok
    produce(stack.bootstrap_servers, topic, second.records, 1)
    assert index_once(spark, engine, settings, load_supervisor_spec(after)).outcome.ok

    query = f'SELECT device IS NULL AS old, SUM("count") AS n FROM "{datasource}" GROUP BY 1 ORDER BY 1'
    expected = [[False, len(second.records)], [True, len(first.records)]]
    assert execute_sql(spark, engine, query).rows() == expected  # before: the first file's schema hid device

    reports = compact(spark, engine, load_supervisor_spec(after), deep_storage)
    assert reports and all(r.outcome.ok for r in reports)  # before: compaction refused the mixed schemas
    assert execute_sql(spark, engine, query).rows() == expected


def test_metrics_added_by_an_update_stay_null_for_older_rows_through_compaction(
        stack, engine, spark, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    settings = settings_for(stack, deep_storage)
    after = spec_json(datasource, topic)  # count, value_sum, value_min, value_max, price_sum
    before = spec_json(datasource, topic)
    before["spec"]["dataSchema"]["metricsSpec"] = [m for m in after["spec"]["dataSchema"]["metricsSpec"]
                                                   if m["name"] in ("count", "value_min")]
    first, second = make_sample_events(3_000, seed=21, bad_every=0), make_sample_events(2_000, seed=22, bad_every=0)
    produce(stack.bootstrap_servers, topic, first.records, 1)
    assert index_once(spark, engine, settings, load_supervisor_spec(before)).outcome.ok
    produce(stack.bootstrap_servers, topic, second.records, 1)
    assert index_once(spark, engine, settings, load_supervisor_spec(after)).outcome.ok

    query = (f'SELECT SUM("count") AS n, COUNT(value_sum) AS rows_with_sum, SUM(value_sum) AS value_sum, '
             f'MIN(value_max) AS lowest_max, COUNT(price_sum) AS rows_with_price, MIN(value_min) AS lowest '
             f'FROM "{datasource}"')
    [before_compaction] = execute_sql(spark, engine, query).rows()
    assert before_compaction[2] == sum(json.loads(r)["value"] for r in second.records)  # only the new rows have it

    reports = compact(spark, engine, load_supervisor_spec(after), deep_storage)
    assert reports and all(r.outcome.ok for r in reports)
    assert execute_sql(spark, engine, query).rows() == [before_compaction]  # before: the old rows' NULLs became 0
