"""Retention and lifecycle on a live overlord: Druid's rules drop what they match, segments are marked
unused and used again by interval, id or datasource, drops racing a publish or a compaction leave each
row visible once, and the kill duty deletes only what was dropped.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from indexing_task.compaction_job import compact
from overlord.coordinator.retention import RULES, dropped
from overlord.dev.sample_data import SampleEvents, make_sample_events, produce
from overlord.http.app import create_app
from segment_store import visible_segments
from tests.helpers import (
    assert_exact,
    committed_total,
    events_spec,
    file_exists,
    merged,
    overlord_cli,
    published_table,
    served,
    spec_json,
    wait_until,
)

HOUR_0 = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 1, 1, tzinfo=UTC))
HOUR_1 = (HOUR_0[1], datetime(2026, 11, 1, 2, tzinfo=UTC))
NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)


def _within(sample: SampleEvents, interval: tuple[datetime, datetime]) -> SampleEvents:
    """The expected totals of the sample's events inside ``interval``."""
    out = SampleEvents()
    for raw in sample.records:
        event = json.loads(raw)
        if interval[0] <= datetime.fromisoformat(event["ts"]) < interval[1]:
            out.count_by_country[event["country"]] += 1
            out.value_by_country[event["country"]] += event["value"]
            out.price_by_country[event["country"]] += event["price"]
    return out


def _rules(*raw: dict) -> list:
    return RULES.validate_python(list(raw))


@pytest.mark.parametrize(("rule", "interval", "drops"), [
    ({"type": "dropBeforeByPeriod", "period": "P1M"}, (NOW - timedelta(days=40), NOW - timedelta(days=31)), True),
    ({"type": "dropBeforeByPeriod", "period": "P1M"}, (NOW - timedelta(days=31), NOW - timedelta(days=29)), False),
    ({"type": "dropByPeriod", "period": "P1D"}, (NOW - timedelta(hours=3), NOW - timedelta(hours=2)), True),
    ({"type": "dropByPeriod", "period": "P1D"}, (NOW + timedelta(hours=1), NOW + timedelta(hours=2)), True),
    ({"type": "dropByPeriod", "period": "P1D", "includeFuture": False},
     (NOW + timedelta(hours=1), NOW + timedelta(hours=2)), False),
    ({"type": "dropByPeriod", "period": "P1D"}, (NOW - timedelta(days=2), NOW - timedelta(hours=2)), False),
    ({"type": "dropByInterval", "interval": "2026-11-01/2026-11-02"}, HOUR_0, True),
    ({"type": "dropByInterval", "interval": "2026-11-01T00:30Z/2026-11-02"}, HOUR_0, False),  # must hold it
    ({"type": "dropForever"}, HOUR_0, True),
])
def test_the_first_rule_that_applies_decides_as_in_druid(rule, interval, drops):
    assert dropped(_rules(rule), interval, NOW) is drops


def test_load_rules_keep_what_they_match_and_later_rules_drop_the_rest():
    rules = _rules({"type": "loadByPeriod", "period": "P7D", "tieredReplicants": {"_default_tier": 2}},
                   {"type": "dropForever"})
    assert not dropped(rules, (NOW - timedelta(days=8), NOW - timedelta(days=6, hours=23)), NOW)  # overlaps: kept
    assert dropped(rules, (NOW - timedelta(days=9), NOW - timedelta(days=8)), NOW)
    assert not dropped([], HOUR_0, NOW)  # no rule applies: kept


def test_rules_drop_and_segments_come_back_by_interval_id_and_datasource(stack, make_topic, datasource,
                                                                          make_overlord, coordinator_of):
    topic = make_topic(1)
    overlord = make_overlord()
    coordinator = coordinator_of(overlord)
    overlord.submit(spec_json(datasource, topic))
    sample = make_sample_events(2_000, bad_every=0, seed=31)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(sample.records), "a publish")
    with served(create_app(overlord, authenticator=None), queries=False) as url:
        rules_url = f"{url}/druid/coordinator/v1/rules/{datasource}"
        bad = httpx.post(rules_url, json=[{"type": "dropByPeriod", "period": "soon"}])
        assert bad.status_code == 400 and "period" in bad.json()["errors"][0]["path"]
        assert httpx.post(rules_url, json=[{"type": "keepForever"}]).status_code == 400
        too_many = httpx.post(rules_url, json=[{"type": "loadForever"}] * 101)
        assert too_many.status_code == 400 and "at most 100" in too_many.text
        keep_first_hour = [{"type": "loadByInterval", "interval": "2026-11-01T00:00Z/2026-11-01T01:00Z",
                            "tieredReplicants": {"_default_tier": 2}}, {"type": "dropForever"}]
        assert httpx.post(rules_url, json=keep_first_hour).status_code == 200
        assert [r["type"] for r in httpx.get(rules_url, params={"full": ""}).json()] == [
            "loadByInterval", "dropForever", "loadForever"]

        dropped_ids = coordinator.apply_retention()[datasource]

        assert dropped_ids and all(s.interval_start == HOUR_0[0] for s in visible_segments(overlord.engine, datasource))
        assert_exact(published_table(overlord.engine, datasource), _within(sample, HOUR_0))
        assert coordinator.apply_retention() == {}  # nothing left to drop
        assert httpx.post(rules_url, json=[]).status_code == 200  # no rules of its own: _default keeps all

        mark = f"{url}/druid/coordinator/v1/datasources/{datasource}"
        restored = httpx.post(f"{mark}/markUsed", json={"interval": "2026-11-01T01:00Z/2026-11-01T02:00Z"})
        assert restored.json() == {"numChangedSegments": len(dropped_ids)}
        assert_exact(published_table(overlord.engine, datasource), sample)
        assert httpx.post(f"{mark}/markUsed", json={"interval": "2026-11-01/P1D", "segmentIds": ["x"]}
                          ).status_code == 400  # one of the two

        one = visible_segments(overlord.engine, datasource)[0]
        assert httpx.delete(f"{mark}/segments/{one.id}").json() == {"numChangedSegments": 1}
        assert one.id not in {s.id for s in visible_segments(overlord.engine, datasource)}
        everything = len(visible_segments(overlord.engine, datasource))
        assert httpx.delete(mark).json() == {"numChangedSegments": everything}
        assert visible_segments(overlord.engine, datasource) == []
        assert httpx.post(mark).json() == {"numChangedSegments": everything + 1}  # the whole datasource back
        assert_exact(published_table(overlord.engine, datasource), sample)


def test_a_drop_racing_a_publish_or_a_compaction_leaves_each_row_visible_once(
        stack, make_topic, datasource, make_overlord, coordinator_of, spark, deep_storage):
    topic = make_topic(1)
    race = threading.Event()
    holder: dict = {}

    def drop_first(_request):  # runs after the task wrote its files, before its publish transaction
        if race.is_set():
            race.clear()
            holder["dropped"] = holder["coordinator"].mark(datasource, False, HOUR_1)

    overlord = holder["overlord"] = make_overlord(before_publish=drop_first, kill_unused_after_s=0,
                                                 kill_backup_window_s=0)
    coordinator = holder["coordinator"] = coordinator_of(overlord)
    overlord.submit(spec_json(datasource, topic))
    first, second = (make_sample_events(800, bad_every=0, seed=s) for s in (41, 42))
    produce(stack.bootstrap_servers, topic, first.records, 1)
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(first.records), "a publish")
    race.set()
    produce(stack.bootstrap_servers, topic, second.records, 1)
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(first.records) + len(second.records),
               "the racing publish")

    assert holder["dropped"]  # the first sample's HOUR_1 segments were dropped; the racing publish's stay
    expected = merged(_within(first, HOUR_0), second)
    assert_exact(published_table(overlord.engine, datasource), expected)

    read = visible_segments(overlord.engine, datasource, HOUR_0)

    def drop_while_compacting(interval, segments):  # planned: compaction has read the set, then the drop
        coordinator.mark(datasource, False, HOUR_0)
        return segments

    reports = compact(spark, overlord.engine, events_spec(datasource), deep_storage, HOUR_0,
                      select=drop_while_compacting)

    assert [r.outcome.status for r in reports] in ([], ["retryable"])  # it swapped nothing
    assert visible_segments(overlord.engine, datasource, HOUR_0) == []
    assert_exact(published_table(overlord.engine, datasource), _within(second, HOUR_1))

    report = coordinator.kill_unused()  # kill_unused_after_s=0: everything dropped goes now
    killed = set(report.unused_segments)
    assert {s.id for s in read} <= killed and not any(file_exists(s.path) for s in read)
    assert all(file_exists(s.path) for s in visible_segments(overlord.engine, datasource))
    assert coordinator.mark(datasource, True) == []  # killed: nothing left to restore
    assert_exact(published_table(overlord.engine, datasource), _within(second, HOUR_1))


def test_the_cli_shows_compaction_sets_rules_and_drops_only_when_confirmed(stack, make_topic, datasource,
                                                                            make_overlord):
    topic = make_topic(1)
    overlord = make_overlord()
    overlord.submit(spec_json(datasource, topic))
    sample = make_sample_events(300, bad_every=0, seed=51)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(sample.records), "a publish")
    with served(create_app(overlord, authenticator=None), queries=False) as url:
        status = overlord_cli("compaction", "status", datasource, "--url", url)
        assert status.returncode == 0, status.stderr
        assert f"{datasource}: default config, skipOffsetFromLatest PT1H" in status.stdout
        assert "2026-11-01T01:00:00+00:00/2026-11-01T02:00:00+00:00" in status.stdout  # one row per interval
        assert overlord_cli("compaction", "set", datasource, "--skip-offset-from-latest", "P2D",
                            "--url", url).returncode == 0
        as_json = json.loads(overlord_cli("compaction", "status", datasource, "--json", "--url", url).stdout)
        [state] = as_json["latestStatus"]
        assert state["config"]["skipOffsetFromLatest"] == "P2D" and state["defaultConfig"] is False
        assert len(state["intervals"]) == 2

        bad_rules = overlord_cli("retention", "set", datasource, '[{"type": "dropByPeriod"}]', "--url", url)
        assert bad_rules.returncode == 2 and "period" in bad_rules.stderr
        assert overlord_cli("retention", "set", datasource, '[{"type": "dropForever"}]', "--url", url).returncode == 0
        shown = overlord_cli("retention", "show", datasource, "--url", url).stdout.splitlines()
        assert [json.loads(line)["type"] for line in shown] == ["dropForever", "loadForever"]

        hour = "2026-11-01T00:00Z/2026-11-01T01:00Z"
        unconfirmed = overlord_cli("datasource", "drop", datasource, "--interval", hour, "--url", url)
        assert unconfirmed.returncode == 2 and "pass --yes" in unconfirmed.stderr
        assert_exact(published_table(overlord.engine, datasource), sample)  # nothing was dropped
        dropped_hour = overlord_cli("datasource", "drop", datasource, "--interval", hour, "--yes", "--url", url)
        assert dropped_hour.returncode == 0 and "dropped" in dropped_hour.stdout, dropped_hour.stderr
        assert_exact(published_table(overlord.engine, datasource), _within(sample, HOUR_1))
        restored = overlord_cli("datasource", "restore", datasource, "--url", url)
        assert restored.returncode == 0 and "restored" in restored.stdout
        assert_exact(published_table(overlord.engine, datasource), sample)


def test_finished_tasks_past_their_retention_are_deleted_by_the_kill_duty(make_overlord, coordinator_of, datasource):
    """A supervisor launches a task every few seconds: without a bound the task table (with each task's
    log) grows by tens of thousands of rows a day.
    """
    from overlord.supervisor.metadata_store import tasks

    overlord = make_overlord(task_retention_s=3600)
    coordinator = coordinator_of(overlord)
    store = overlord.store
    for name, status in [("old_ok", "SUCCESS"), ("old_failed", "FAILED"), ("old_running", "RUNNING"),
                         ("new_ok", "SUCCESS")]:
        store.insert_task(f"{datasource}_{name}", datasource, datasource, {0: 0}, {0: 1})
        if status != "RUNNING":
            store.finish_task(f"{datasource}_{name}", status, "done", None, log="a line\n")
    store.record_reset(datasource, datasource, {0: 0}, {0: 5}, "skipped records [0, 5)")  # kept: an audit trail
    store.task_rows.flush()  # task rows are written behind; this test changes them in place
    with overlord.engine.begin() as conn:
        conn.execute(tasks.update().where(tasks.c.id.like(f"{datasource}_old_%") | (tasks.c.type == "reset_offsets"))
                     .values(created_at=datetime.now(UTC) - timedelta(hours=2)))

    coordinator.kill_unused()
    left = [t.id.removeprefix(f"{datasource}_") for t in store.tasks(datasource=datasource)]
    assert sorted(left) == ["new_ok", "old_running", *(i for i in left if i.startswith("reset_offsets_"))]
    assert sum(i.startswith("reset_offsets_") for i in left) == 1
