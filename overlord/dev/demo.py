"""``overlord demo``: the whole path on the embedded stack, end to end, in one command.

Starts the broker and PostgreSQL, produces sample events (with some malformed ones) to a
topic, indexes them once with the example ``events`` spec, queries the published segments
with SQL, checks the totals against what was produced, and indexes again to show that nothing is
published twice.
"""

from __future__ import annotations

import time

from indexing_task.spark import get_spark
from overlord.dev.sample_data import create_topic, make_sample_events, produce
from overlord.dev.stack import dev_stack
from overlord.query.engine import execute_sql
from overlord.query.formats import format_table
from overlord.supervisor.task_ranges import index_once
from overlord.task_report_text import format_report
from segment_store import upgrade_schema
from segment_store.database import metadata_engine
from specs import load_example

__all__ = ["run_demo"]


def _step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def run_demo(events: int = 200_000, partitions: int = 4) -> int:
    """Start the embedded stack, produce sample events, index, query and check them; the exit code."""
    spec = load_example("events")
    topic = spec.spec.io_config.topic
    assert topic is not None  # the example names its topic
    with dev_stack() as stack:
        _step(f"embedded stack up: Kafka {stack.bootstrap_servers}, PostgreSQL {stack.database_url}")
        settings = stack.settings(spark_master="local[*]")
        sample = make_sample_events(events)
        _step(f"producing {len(sample.records):,} records ({sample.bad} malformed) to topic "
              f"'{topic}' in {partitions} partitions")
        create_topic(stack.bootstrap_servers, topic, partitions)
        started = time.monotonic()
        produce(stack.bootstrap_servers, topic, sample.records, partitions)
        print(f"produced in {time.monotonic() - started:.1f}s")

        _step("starting Spark (local) and indexing once")
        engine = metadata_engine(stack.database_url)
        upgrade_schema(engine)
        spark = get_spark(settings.spark_master, settings.spark_conf)
        report = index_once(spark, engine, settings, spec)
        print(format_report(report))

        _step("querying the published segments with SQL: events and value per country")
        result = execute_sql(spark, engine, 'SELECT country, SUM("count") AS events, SUM(value_sum) AS "value", '
                             'ROUND(SUM(price_sum), 2) AS price FROM events GROUP BY country ORDER BY events DESC')
        print(format_table(result))
        totals = {country: (n, value) for country, n, value, _ in result.rows()}
        exact = totals == {c: (n, sample.value_by_country[c]) for c, n in sample.count_by_country.items()}
        print(f"matches what was produced exactly: {'yes' if exact else 'NO'}")

        _step("indexing again: the committed offsets are at the end, so nothing is read twice")
        again = index_once(spark, engine, settings, spec)
        print(format_report(again))
        spark.stop()
        engine.dispose()
        return 0 if exact and report.outcome.ok and again.records == 0 else 1
