"""Auto-compaction on a live overlord: Druid's compaction-config calls, the duty compacting only the
intervals older than ``skipOffsetFromLatest``, exact totals throughout, data-changing fields refused.
"""

from __future__ import annotations

from collections import Counter

import httpx

from overlord.dev.sample_data import make_sample_events, produce
from overlord.http.app import create_app
from segment_store import visible_segments
from tests.helpers import assert_exact, committed_total, merged, published_table, served, spec_json, wait_until

CONFIG = "/druid/coordinator/v1/config/compaction"


def test_the_duty_compacts_older_intervals_and_totals_stay_exact(stack, make_topic, datasource, make_overlord):
    topic = make_topic(2)
    overlord = make_overlord(compaction_period_s=0)  # the duty is run by hand below: deterministic
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

    with served(create_app(overlord, authenticator=None)) as url:
        refused = httpx.post(url + CONFIG, json={"dataSource": datasource, "metricsSpec": []})
        assert refused.status_code == 400 and refused.json()["errors"][0]["path"] == "metricsSpec"
        assert "keeps the datasource's own" in refused.json()["errors"][0]["message"]
        bad_skip = httpx.post(url + CONFIG, json={"dataSource": datasource, "skipOffsetFromLatest": "soon"})
        assert bad_skip.status_code == 400 and bad_skip.json()["errors"][0]["path"] == "skipOffsetFromLatest"
        stored = httpx.post(url + CONFIG, json={"dataSource": datasource, "skipOffsetFromLatest": "PT1H",
                                                "taskPriority": 25})
        assert stored.status_code == 200 and stored.json()["ignoredFields"] == ["taskPriority"]
        assert httpx.get(f"{url}{CONFIG}/{datasource}").json()["skipOffsetFromLatest"] == "PT1H"

        [(task_id, done)] = overlord.auto_compact()
        [report] = done.result(180)

        assert (report.interval_start, report.interval_end) == first and report.outcome.ok
        after = Counter((s.interval_start, s.interval_end) for s in visible_segments(overlord.engine, datasource))
        assert after[first] == 1 and after[last] == before[last]  # the newest hour is within the skip offset
        assert_exact(published_table(overlord.engine, datasource), merged(*samples))
        wait_until(lambda: overlord.store.task(task_id).status == "SUCCESS", "the compaction task's row")
        assert overlord.auto_compact() == []  # nothing left to compact outside the skip offset
        assert httpx.delete(f"{url}{CONFIG}/{datasource}").status_code == 200
        assert httpx.get(f"{url}{CONFIG}/{datasource}").status_code == 404
        assert httpx.get(url + CONFIG).json() == {"compactionConfigs": []}
