"""Auto-compaction on a live overlord: Druid's compaction-config calls, the duty compacting only the
intervals older than ``skipOffsetFromLatest``, exact totals throughout, data-changing fields refused.
"""

from __future__ import annotations

from collections import Counter

import httpx

from overlord.coordinator.auto_compaction import CompactionConfig
from overlord.dev.sample_data import make_sample_events, produce
from overlord.http.app import create_app
from segment_store import visible_segments
from tests.helpers import assert_exact, committed_total, merged, published_table, served, spec_json, wait_until

CONFIG = "/druid/coordinator/v1/config/compaction"


def test_the_duty_compacts_older_intervals_and_totals_stay_exact(stack, make_topic, datasource, make_overlord,
                                                                  coordinator_of):
    topic = make_topic(2)
    overlord = make_overlord(compaction_period_s=0)  # the duty is run by hand below: deterministic
    coordinator = coordinator_of(overlord)
    overlord.submit(spec_json(datasource, topic))
    samples = []
    for seed in range(3):  # three publishes, so both hours hold several segments
        samples.append(make_sample_events(1_500, bad_every=0, seed=70 + seed))
        produce(stack.bootstrap_servers, topic, samples[-1].records, 2)
        total = sum(len(s.records) for s in samples)
        wait_until(lambda total=total: committed_total(overlord.engine, datasource) == total, "a publish")
    before = Counter((s.interval_start, s.interval_end) for s in visible_segments(overlord.engine, datasource))
    first, last = sorted(before)
    assert before[first] > 1 and before[last] > 1

    with served(create_app(overlord, authenticator=None), queries=False) as url:
        refused = httpx.post(url + CONFIG, json={"dataSource": datasource, "metricsSpec": []})
        assert refused.status_code == 400 and refused.json()["errors"][0]["path"] == "metricsSpec"
        assert "keeps the datasource's own" in refused.json()["errors"][0]["message"]
        bad_skip = httpx.post(url + CONFIG, json={"dataSource": datasource, "skipOffsetFromLatest": "soon"})
        assert bad_skip.status_code == 400 and bad_skip.json()["errors"][0]["path"] == "skipOffsetFromLatest"
        stored = httpx.post(url + CONFIG, json={"dataSource": datasource, "skipOffsetFromLatest": "PT1H",
                                                "taskPriority": 25})
        assert stored.status_code == 200 and stored.json()["ignoredFields"] == ["taskPriority"]
        assert httpx.get(f"{url}{CONFIG}/{datasource}").json()["skipOffsetFromLatest"] == "PT1H"

        [(task_id, done)] = coordinator.auto_compact()
        [report] = done.result(180)

        assert (report.interval_start, report.interval_end) == first and report.outcome.ok
        after = Counter((s.interval_start, s.interval_end) for s in visible_segments(overlord.engine, datasource))
        assert after[first] == 1 and after[last] == before[last]  # the newest hour is within the skip offset
        assert_exact(published_table(overlord.engine, datasource), merged(*samples))
        wait_until(lambda: overlord.store.task(task_id).status == "SUCCESS", "the compaction task's row")
        assert coordinator.auto_compact() == []  # nothing left to compact outside the skip offset
        assert httpx.delete(f"{url}{CONFIG}/{datasource}").status_code == 200
        assert httpx.get(f"{url}{CONFIG}/{datasource}").status_code == 404
        assert httpx.get(url + CONFIG).json() == {"compactionConfigs": []}


def _by_interval(engine, datasource):
    out: dict = {}
    for s in visible_segments(engine, datasource):
        out.setdefault((s.interval_start, s.interval_end), []).append(s)
    return out


def test_by_default_fresh_segments_are_tiered_and_settled_hours_compacted_whole(
        stack, make_topic, datasource, make_overlord, coordinator_of):
    topic = make_topic(1)
    overlord = make_overlord(task_min_interval_s=0)  # no compaction config: the default applies
    coordinator = coordinator_of(overlord)
    raw = spec_json(datasource, topic)
    raw["spec"]["tuningConfig"]["maxRowsPerSegment"] = 100  # segments of 50+ rows count as full
    overlord.submit(raw)
    samples = []
    for seed, n in enumerate([600] + [8] * 8):  # one big publish, then eight small ones (both hours each)
        samples.append(make_sample_events(n, bad_every=0, seed=90 + seed))
        produce(stack.bootstrap_servers, topic, samples[-1].records, 1)
        total = sum(len(s.records) for s in samples)
        wait_until(lambda total=total: committed_total(overlord.engine, datasource) == total, "a publish")
    older, newest = sorted(before := _by_interval(overlord.engine, datasource))
    full = {s.id for s in before[newest] if s.num_rows >= 50}
    assert full and len(before[newest]) - len(full) >= 8 and len(before[older]) >= 9

    [(task_id, done)] = coordinator.auto_compact()
    reports = done.result(180)

    assert all(r.outcome.ok for r in reports)
    after = _by_interval(overlord.engine, datasource)
    jobs = {(s.descriptor["compacted_by"]["job_id"], s.descriptor["compacted_by"]["whole_interval"])
            for s in after[older]}
    assert len(jobs) == 1 and jobs.pop()[1] is True  # the settled hour: one whole-interval compaction
    assert {s.id for s in after[newest]} >= full and len(after[newest]) == len(full) + 1  # small ones: one tier merge
    assert_exact(published_table(overlord.engine, datasource), merged(*samples))
    wait_until(lambda: overlord.store.task(task_id).status == "SUCCESS", "the compaction task's row")
    assert coordinator.auto_compact() == []  # compacted whole stays put; one small segment is no full tier

    coordinator.set_compaction_config(CompactionConfig(dataSource=datasource, skipOffsetFromLatest="P1D"))
    assert coordinator.compaction_configs()[datasource].skip_offset_from_latest == "P1D"  # its own config wins


def test_a_duty_run_cut_short_by_shutdown_is_not_logged_as_an_error(make_overlord, coordinator_of, caplog):
    """Quickstart's Ctrl-C logged an auto-compaction traceback: the run met the task runner already shut down."""
    overlord = make_overlord()
    coordinator = coordinator_of(overlord)
    coordinator.stop()
    overlord.stop(grace_s=1)

    def meets_the_shutdown() -> None:
        raise RuntimeError("the executor has shut down")

    with caplog.at_level("INFO", logger="overlord.coordinator.duties"):
        coordinator._run_duty("auto-compaction", meets_the_shutdown)
    [record] = [r for r in caplog.records if "auto-compaction" in r.getMessage()]
    assert record.levelname == "INFO" and "shutdown" in record.getMessage() and record.exc_info is None


def test_the_duties_run_at_different_phases_of_their_period(make_overlord, coordinator_of):
    """Auto-compaction and the Iceberg export both ran at each minute's start: their passes over 20 datasources
    landed together, and indexing tasks meanwhile went from a 0.2-0.5 s p95 launch->publish to 2-2.4 s.
    """
    overlord = make_overlord(compaction_period_s=60, retention_period_s=60, iceberg_period_s=60, kill_period_s=600)
    coordinator = coordinator_of(overlord)
    runs = {job.id: job.next_run_time.timestamp() for job in coordinator.scheduler.get_jobs()
            if job.id in ("auto-compaction", "retention", "iceberg", "kill")}
    assert len(runs) == 4
    first, second, third = sorted(runs[name] for name in ("auto-compaction", "retention", "iceberg"))
    assert min(second - first, third - second) >= 10  # seconds apart, each minute
    assert runs["iceberg"] - runs["auto-compaction"] >= 20  # the two heavy ones far apart
