"""Persistent supervisors on the real broker, PostgreSQL and Spark, driven in-process."""

from __future__ import annotations

import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from overlord.config import Settings
from overlord.dev.sample_data import create_topic, make_sample_events, produce
from overlord.dev.stack import TansuBroker, free_port
from overlord.http.status_payloads import status_payload
from overlord.supervisor.manager import Overlord
from tests.helpers import (
    ON_EVERY_DEEP_STORAGE,
    assert_exact,
    committed_total,
    merged,
    published_table,
    spec_json,
    wait_until,
)


@ON_EVERY_DEEP_STORAGE
def test_supervisor_keeps_ingesting_exactly(stack, make_topic, datasource, make_overlord):
    topic = make_topic(3)
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(spec_json(datasource, topic, taskCount=2))
    batches = [make_sample_events(4_000, seed=s) for s in range(3)]
    produced = 0
    for batch in batches:
        produce(stack.bootstrap_servers, topic, batch.records, 3)
        produced += len(batch.records)
        time.sleep(0.5)

    wait_until(lambda: committed_total(engine, datasource) == produced, "all records committed")
    assert_exact(published_table(engine, datasource), merged(*batches))
    sup = overlord.get(datasource)
    wait_until(lambda: sum(sup.status.lag.values()) == 0 and not sup.status.active_tasks, "lag 0")
    assert sup.status.state == "RUNNING"
    assert sup.status.counters.processed == sum(len(b.records) - b.bad for b in batches)
    assert all(t.status == "SUCCESS" for t in sup.status.recent_tasks)


def test_replicas_both_run_one_publishes(stack, make_topic, datasource, make_overlord):
    topic = make_topic(2)
    sample = make_sample_events(6_000)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(spec_json(datasource, topic, replicas=2))

    sup = overlord.get(datasource)
    wait_until(lambda: sup.status.counters.lost_publish_races >= 1, "a replica to lose the publish race")
    wait_until(lambda: committed_total(engine, datasource) == len(sample.records), "all committed")
    assert_exact(published_table(engine, datasource), sample)
    details = [t.detail for t in sup.status.recent_tasks]
    assert "published" in details and "another replica published this range first" in details
    assert sup.status.healthy and not any(t.status == "FAILED" for t in sup.status.recent_tasks)


@ON_EVERY_DEEP_STORAGE
def test_restart_resumes_from_committed_offsets(stack, make_topic, datasource, make_overlord):
    topic = make_topic(2)
    first, second = make_sample_events(3_000, seed=1), make_sample_events(3_000, seed=2)
    produce(stack.bootstrap_servers, topic, first.records, 2)
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(spec_json(datasource, topic))
    wait_until(lambda: committed_total(engine, datasource) == len(first.records), "first batch committed")
    overlord.stop(grace_s=10)

    produce(stack.bootstrap_servers, topic, second.records, 2)
    restarted = make_overlord(database_url=overlord.settings.database_url)
    assert datasource in restarted.supervisors
    wait_until(lambda: committed_total(engine, datasource) == len(first.records) + len(second.records),
               "second batch committed after restart")
    assert_exact(published_table(engine, datasource), merged(first, second))


def test_suspend_resume_and_reset(stack, make_topic, datasource, make_overlord):
    topic = make_topic(1)
    first, second = make_sample_events(2_000, seed=3), make_sample_events(2_000, seed=4)
    produce(stack.bootstrap_servers, topic, first.records, 1)
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(spec_json(datasource, topic))
    wait_until(lambda: committed_total(engine, datasource) == len(first.records), "first batch committed")

    sup = overlord.set_suspended(datasource, True)
    produce(stack.bootstrap_servers, topic, second.records, 1)
    runs = sup.runs
    wait_until(lambda: sup.runs >= runs + 3, "three runs of the suspended supervisor's loop")
    assert sup.status.state == "SUSPENDED" and committed_total(engine, datasource) == len(first.records)

    overlord.set_suspended(datasource, False)
    wait_until(lambda: committed_total(engine, datasource) == len(first.records) + len(second.records),
               "catch-up after resume")
    assert_exact(published_table(engine, datasource), merged(first, second))

    overlord.reset(datasource)  # forget offsets: the topic is read again from the earliest offset
    wait_until(lambda: sum(published_table(engine, datasource).column("count").to_pylist())
               == 2 * (len(first.records) + len(second.records) - first.bad - second.bad), "re-ingestion")


def test_spec_update_continues_without_loss(stack, make_topic, datasource, make_overlord):
    topic = make_topic(2)
    first, second = make_sample_events(3_000, seed=5), make_sample_events(3_000, seed=6)
    produce(stack.bootstrap_servers, topic, first.records, 2)
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(spec_json(datasource, topic))
    wait_until(lambda: committed_total(engine, datasource) == len(first.records), "first batch committed")

    updated = spec_json(datasource, topic, taskCount=2)
    updated["spec"]["dataSchema"]["granularitySpec"]["queryGranularity"] = "HOUR"
    overlord.submit(updated)
    produce(stack.bootstrap_servers, topic, second.records, 2)
    wait_until(lambda: committed_total(engine, datasource) == len(first.records) + len(second.records),
               "second batch committed under the new spec")
    assert_exact(published_table(engine, datasource), merged(first, second))
    assert [r.spec["spec"]["ioConfig"]["taskCount"] for r in overlord.history(datasource)] == [2, 1]


def test_unreachable_broker_is_unhealthy_then_recovers(datasource, make_overlord):
    port = free_port()
    raw = spec_json(datasource, "late-topic", consumerProperties={"bootstrap.servers": f"127.0.0.1:{port}"})
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(raw)
    sup = overlord.get(datasource)
    wait_until(lambda: sup.status.state == "UNHEALTHY_SUPERVISOR", "the supervisor to report the broker", 60)
    assert any("late-topic" in e.message or "Kafka" in e.message for e in sup.status.recent_errors)

    broker = TansuBroker(port)
    broker.start()
    try:
        create_topic(broker.bootstrap_servers, "late-topic", 1)
        sample = make_sample_events(1_000)
        produce(broker.bootstrap_servers, "late-topic", sample.records, 1)
        wait_until(lambda: committed_total(engine, datasource) == len(sample.records), "recovery", 90)
        assert sup.status.state == "RUNNING"
        assert_exact(published_table(engine, datasource), sample)
    finally:
        broker.stop()


def test_postgres_outage_is_unhealthy_then_recovers(stack, spark, make_topic, datasource, tmp_path: Path):
    """A PostgreSQL of its own, stopped and started again under a running overlord."""
    import sqlalchemy as sa

    from overlord.dev.stack import EmbeddedPostgres

    pg_dir = Path(tempfile.mkdtemp(prefix="outage-"))  # under /tmp: PostgreSQL runs as nobody when we are root
    pg_dir.chmod(0o755)
    postgres = EmbeddedPostgres(pg_dir / "pg")
    postgres.start()
    engine = sa.create_engine(postgres.url, pool_pre_ping=True)
    settings = Settings(database_url=postgres.url, deep_storage=str(tmp_path / "deep"),
                        kafka_bootstrap_servers=stack.bootstrap_servers)
    overlord = Overlord(settings, engine, spark)
    overlord.start()
    try:
        topic = make_topic(1)
        first, second = make_sample_events(2_000, seed=7), make_sample_events(2_000, seed=8)
        produce(stack.bootstrap_servers, topic, first.records, 1)
        overlord.submit(spec_json(datasource, topic))
        wait_until(lambda: committed_total(engine, datasource) == len(first.records), "first batch committed")
        sup = overlord.get(datasource)

        postgres.stop()
        produce(stack.bootstrap_servers, topic, second.records, 1)
        # Without its session it cannot know whether another overlord took over: it stops leading.
        wait_until(lambda: not overlord.leading and overlord.supervisors == {}, "the overlord to step down", 60)
        assert sup.status.state == "STOPPING"

        postgres.start()  # it runs for leadership again, wins, and resumes from the committed offsets
        wait_until(lambda: committed_total(engine, datasource) == len(first.records) + len(second.records),
                   "catch-up after PostgreSQL returned", 120)
        wait_until(lambda: overlord.get(datasource).status.healthy, "healthy again")
        assert_exact(published_table(engine, datasource), merged(first, second))
    finally:
        overlord.stop(grace_s=5)
        engine.dispose()
        postgres.stop()


def test_a_backlog_is_worked_off_by_bounded_tasks_exactly(stack, make_topic, datasource, make_overlord):
    topic = make_topic(2)
    backlog = make_sample_events(22_000, seed=31)
    produce(stack.bootstrap_servers, topic, backlog.records, 2)
    overlord = make_overlord(task_max_records=5_000)  # the backlog is more than four caps long
    engine = overlord.engine
    overlord.submit(spec_json(datasource, topic))
    wait_until(lambda: committed_total(engine, datasource) == len(backlog.records), "the backlog committed", 120)
    assert_exact(published_table(engine, datasource), backlog)
    ranges = [t for t in overlord.store.tasks(datasource=datasource) if t.status == "SUCCESS"]
    assert len(ranges) >= 5
    assert all(sum(t.end_offsets.values()) - sum(t.start_offsets.values()) <= 5_000 for t in ranges)


def test_a_stored_spec_that_no_longer_loads_does_not_stop_the_others(make_topic, datasource, make_overlord, caplog):
    """After an upgrade that refuses a field, the other supervisors resume and the refused one is named."""
    overlord = make_overlord()
    overlord.submit(spec_json(datasource, make_topic(1)))
    stale = spec_json("stale_" + datasource, make_topic(1))
    stale["spec"]["ioConfig"]["topicPattern"] = "events-.*"  # refused now, stored by an older version
    overlord.store.append_spec("stale_" + datasource, stale)
    overlord.stop(grace_s=10)

    restarted = make_overlord(database_url=overlord.settings.database_url)
    assert datasource in restarted.supervisors and "stale_" + datasource not in restarted.supervisors
    assert any(f"stale_{datasource}" in r.getMessage() and "topicPattern" in r.getMessage()
               for r in caplog.records if r.levelname == "ERROR")
    fixed = spec_json("stale_" + datasource, stale["spec"]["ioConfig"]["topic"])
    restarted.submit(fixed)  # the refused earlier spec does not block a corrected one
    assert "stale_" + datasource in restarted.supervisors


def test_late_and_early_messages_are_thrown_away_by_the_windows_fixed_at_planning(
        stack, make_topic, datasource, make_overlord):
    """Events older than lateMessageRejectionPeriod before the task was planned, or newer than its duration
    plus earlyMessageRejectionPeriod after, are counted as thrown away and published nowhere.
    """
    topic = make_topic(1)
    now = datetime.now(UTC)
    kept, rejected = make_sample_events(300, bad_every=10**9, start=now - timedelta(minutes=30)), 0
    records = list(kept.records)
    for offset in (timedelta(hours=-3), timedelta(hours=5)):
        records += make_sample_events(100, bad_every=10**9, start=now + offset).records
        rejected += 100
    produce(stack.bootstrap_servers, topic, records, 1)
    overlord = make_overlord()
    overlord.submit(spec_json(datasource, topic, lateMessageRejectionPeriod="PT1H",
                              earlyMessageRejectionPeriod="PT1H", taskDuration="PT1H"))

    wait_until(lambda: committed_total(overlord.engine, datasource) == len(records), "all records committed")
    assert_exact(published_table(overlord.engine, datasource), kept)
    sup = overlord.get(datasource)  # counters learn of a task once it is handled, just after its commit
    wait_until(lambda: sup.status.counters.processed + sup.status.counters.thrown_away == len(records),
               "the finished task handled")
    counters = sup.status.counters
    assert (counters.processed, counters.thrown_away, counters.unparseable) == (300, rejected, 0)


def test_discovered_dimensions_are_shown_in_the_status(stack, make_topic, datasource, make_overlord):
    topic = make_topic(1)
    records = [json.dumps({"ts": "2026-11-01T00:00:00Z", "value": 1, "price": 1.0, **extra}).encode()
               for extra in ({"country": "DE"}, {"country": "FR", "city": "Lyon"})]
    produce(stack.bootstrap_servers, topic, records, 1)
    raw = spec_json(datasource, topic)
    raw["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [], "dimensionExclusions": ["city"]}
    overlord = make_overlord()
    overlord.submit(raw)

    wait_until(lambda: committed_total(overlord.engine, datasource) == len(records), "all records committed")
    sup = overlord.get(datasource)  # the status learns of a task's rows once the task is handled, after its commit
    wait_until(lambda: sup.status.counters.processed == len(records), "the finished tasks handled")
    assert status_payload(sup.status)["payload"]["discoveredDimensions"] == ["country"]
    assert sorted(published_table(overlord.engine, datasource).column("country").to_pylist()) == ["DE", "FR"]
