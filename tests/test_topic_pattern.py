"""``topicPattern``: one datasource reading every topic a pattern matches, on the real broker, PostgreSQL and Spark."""

from __future__ import annotations

import uuid
from collections import Counter

from overlord.dev.sample_data import create_topic, make_sample_events, produce
from segment_store import TopicPartitionId, committed_offsets
from specs import SEVERAL_TOPICS
from tests.helpers import assert_exact, committed_total, merged, published_table, spec_json, wait_until


def test_every_matching_topic_is_ingested_exactly_and_a_new_one_from_its_start(
        stack, datasource, make_overlord):
    """Whole-name matches only; offsets are kept per topic and partition; a topic created later is read
    from its earliest offset; each row's ``kafka.topic`` is the topic it came from.
    """
    prefix = f"tp{uuid.uuid4().hex[:8]}"
    clicks, views, orders = f"{prefix}-clicks", f"{prefix}-views", f"{prefix}-orders"
    samples = {clicks: make_sample_events(3_000, seed=1), views: make_sample_events(2_000, seed=2)}
    for topic, partitions in ((clicks, 2), (views, 3), (f"x{prefix}-clicks", 1), (prefix, 1)):
        create_topic(stack.bootstrap_servers, topic, partitions)
        produce(stack.bootstrap_servers, topic, samples.get(topic, make_sample_events(500, seed=9)).records,
                partitions)
    raw = spec_json(datasource, None, topicPattern=f"{prefix}-.*", taskCount=2,
                    inputFormat={"type": "kafka", "valueFormat": {"type": "json"}})
    raw["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"].append("kafka.topic")
    overlord = make_overlord()
    engine = overlord.engine
    overlord.submit(raw)

    read = sum(len(s.records) for s in samples.values())
    wait_until(lambda: committed_total(engine, datasource) == read, "both matching topics committed")
    stored = committed_offsets(engine, datasource)
    assert stored is not None and stored.topic == SEVERAL_TOPICS
    assert set(stored.offsets) == {TopicPartitionId(clicks, 0), TopicPartitionId(clicks, 1),
                                   *(TopicPartitionId(views, p) for p in range(3))}

    samples[orders] = make_sample_events(1_500, seed=3)
    create_topic(stack.bootstrap_servers, orders, 2)
    produce(stack.bootstrap_servers, orders, samples[orders].records, 2)
    read += len(samples[orders].records)
    wait_until(lambda: committed_total(engine, datasource) == read, "the topic created later committed")

    table = published_table(engine, datasource)
    assert_exact(table, merged(*samples.values()))
    per_topic: Counter[str] = Counter()
    for row in table.select(["kafka.topic", "count"]).to_pylist():
        per_topic[row["kafka.topic"]] += row["count"]
    assert per_topic == {topic: len(s.records) - s.bad for topic, s in samples.items()}
    sup = overlord.get(datasource)
    wait_until(lambda: not sup.status.active_tasks and sum(sup.status.lag.values()) == 0, "lag 0")
    assert sup.status.latest.to_json().keys() == {f"{orders}:0", f"{orders}:1", f"{clicks}:0", f"{clicks}:1",
                                                  *(f"{views}:{p}" for p in range(3))}
    assert sup.status.healthy and all(t.status == "SUCCESS" for t in sup.status.recent_tasks)
