"""The HTTP API over real HTTP: an in-process uvicorn on a free port, the real broker, PostgreSQL and Spark.

Each server gets a database of its own: ``Overlord.start`` resumes every live supervisor it
finds and fails every RUNNING task row, so sharing the session database would couple these
tests to whatever other test modules left behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from overlord.dev.sample_data import make_sample_events, produce
from overlord.dev.stack import DevStack, free_port
from overlord.http.app import create_app
from overlord.http.redact import SecretLogFilter, SecretRegistry
from overlord.metrics import package_version
from overlord.supervisor.manager import Overlord
from overlord.supervisor.task_ranges import index_once
from segment_store import committed_offsets, pin_offsets, visible_segments
from specs import load_supervisor_spec
from tests.helpers import (
    assert_exact,
    committed_total,
    fresh_database,
    overlord_cli,
    published_table,
    served,
    spec_json,
    start_overlord,
    wait_until,
)

V1 = "/druid/indexer/v1"
SECRET = "hunter2"






@dataclass
class Api:
    http: httpx.Client
    url: str
    overlord: Overlord
    engine: sa.Engine
    secrets: SecretRegistry

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(V1 + path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.post(V1 + path, **kwargs)


@pytest.fixture(scope="module")
def api(stack: DevStack, engine: sa.Engine, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    overlord = start_overlord(stack, engine, spark, str(tmp_path_factory.mktemp("deep")))
    db = overlord.engine
    secrets = SecretRegistry()
    try:
        with served(create_app(overlord, secrets, authenticator=None)) as url, \
                httpx.Client(base_url=url, timeout=30) as http:
            yield Api(http, url, overlord, db, secrets)
    finally:
        overlord.stop(grace_s=10)
        db.dispose()


def submit(api: Api, spec: dict[str, Any]) -> str:
    response = api.post("/supervisor", json=spec)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


# --- supervisors -------------------------------------------------------------------------------


def test_submit_returns_the_id_and_lists_show_it(api: Api, make_topic, datasource):
    topic = make_topic(1)
    assert api.post("/supervisor", json=spec_json(datasource, topic)).json() == {"id": datasource, "ignoredFields": []}

    assert datasource in api.get("/supervisor")
    [full] = [e for e in api.get("/supervisor", full="") if e["id"] == datasource]
    assert set(full) == {"id", "spec", "state", "detailedState", "healthy", "suspended"}
    assert full["spec"]["spec"]["ioConfig"]["topic"] == topic
    [state] = [e for e in api.get("/supervisor", state="true") if e["id"] == datasource]
    assert set(state) == {"id", "state", "detailedState", "healthy", "suspended"} and state["suspended"] is False

    submit(api, spec_json(datasource, topic, taskCount=2))  # an update keeps the id
    spec = api.get(f"/supervisor/{datasource}")
    assert spec["spec"]["ioConfig"]["taskCount"] == 2 and spec["suspended"] is False
    assert [h["spec"]["spec"]["ioConfig"]["taskCount"] for h in api.get(f"/supervisor/{datasource}/history")] == [2, 1]


def _edit(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    spec = spec_json("bad_spec", "t")
    change(spec)
    return spec


@pytest.mark.parametrize(("body", "paths"), [
    (_edit(lambda s: s["spec"]["ioConfig"].update(taskCount="two")), ["spec.ioConfig.taskCount"]),
    (_edit(lambda s: s["spec"]["ioConfig"].update(taskCount=-2)), ["spec.ioConfig.taskCount"]),
    (_edit(lambda s: s["spec"]["ioConfig"].pop("topic")), ["spec.ioConfig.topic"]),
    (_edit(lambda s: s["spec"]["dataSchema"]["metricsSpec"][1].update(type="median")),
     ["spec.dataSchema.metricsSpec[1].type"]),
    (_edit(lambda s: s["spec"]["ioConfig"].update(consumerProperties=["x"])), ["spec.ioConfig.consumerProperties"]),
    (_edit(lambda s: (s["spec"]["ioConfig"].pop("topic"), s["spec"]["ioConfig"].update(replicas=0))),
     ["spec.ioConfig.topic", "spec.ioConfig.replicas"]),
    (b'{"type": "kafka", "spec": ', ["$"]),
    (b"[1, 2]", ["$"]),
    (b"", ["$"]),
], ids=["taskCount-type", "taskCount-negative", "missing-topic", "unknown-aggregator", "consumerProperties-type",
        "two-problems", "invalid-json", "not-an-object", "empty-body"])
def test_invalid_spec_is_400_naming_each_bad_field(api: Api, body: dict[str, Any] | bytes, paths: list[str]):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = api.post("/supervisor", content=content, headers={"Content-Type": "application/json"})

    assert response.status_code == 400, response.text
    answer = response.json()
    assert sorted(e["path"] for e in answer["errors"]) == sorted(paths)
    message = answer["errorMessage"]
    assert message.startswith("invalid supervisor spec: ") and all(p in message for p in paths)
    assert "bad_spec" not in api.get("/supervisor")


def test_fields_accepted_without_effect_are_named_in_the_answer_the_status_and_the_log(
        api: Api, make_topic, datasource, caplog):
    raw = spec_json(datasource, make_topic(1))
    raw["spec"]["tuningConfig"]["intermediatePersistPeriod"] = "PT10M"
    raw["spec"]["ioConfig"]["autoScalerConfig"] = {"enableTaskAutoScaler": True}
    ignored = ["spec.ioConfig.autoScalerConfig", "spec.tuningConfig.intermediatePersistPeriod"]
    with caplog.at_level(logging.INFO, logger="overlord"):
        assert api.post("/supervisor", json=raw).json() == {"id": datasource, "ignoredFields": ignored}
    assert api.get(f"/supervisor/{datasource}/status")["payload"]["ignoredFields"] == ignored
    assert any(datasource in r.getMessage() and all(p in r.getMessage() for p in ignored) for r in caplog.records)

    raw["spec"]["tuningConfig"]["maxRowsPerSegmnet"] = 10  # a typo is refused, not ignored
    refused = api.post("/supervisor", json=raw)
    assert refused.status_code == 400 and [e["path"] for e in refused.json()["errors"]] == [
        "spec.tuningConfig.maxRowsPerSegmnet"]


def test_a_metric_dropped_and_added_again_keeps_its_aggregator(api: Api, make_topic, datasource):
    """Published rows were aggregated as longMax: a later spec cannot bring the name back as longSum."""
    original = spec_json(datasource, make_topic(1))
    submit(api, original)
    dropped = json.loads(json.dumps(original))
    dropped["spec"]["dataSchema"]["metricsSpec"] = [m for m in original["spec"]["dataSchema"]["metricsSpec"]
                                                    if m["name"] != "value_max"]
    submit(api, dropped)
    again = json.loads(json.dumps(dropped))
    again["spec"]["dataSchema"]["metricsSpec"].append({"type": "longSum", "name": "value_max", "fieldName": "value"})

    response = api.post("/supervisor", json=again)
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["path"].startswith("spec.dataSchema.metricsSpec[") and "expected longMax" in error["message"]


def test_secrets_in_consumer_properties_appear_in_no_response(api: Api, make_topic, datasource):
    properties = {"sasl.password": SECRET, "client.id": "api-test", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN"}  # no sasl.username: librdkafka refuses to create the consumer
    topic = make_topic(1)
    bodies = [api.post("/supervisor", json=spec_json(datasource, topic, consumerProperties=properties)).text]
    bad = spec_json(datasource, topic, consumerProperties=properties, taskCount=0)
    bodies.append(api.post("/supervisor", json=bad).text)
    wait_until(lambda: api.get(f"/supervisor/{datasource}/status")["payload"]["recentErrors"] != [],
               "the supervisor to record an error", 15)  # librdkafka refuses PLAIN without a username
    bodies += [api.post(f"/supervisor/{datasource}/{verb}").text for verb in ("suspend", "resume")]
    for path in ("/supervisor", "/supervisor?full", "/supervisor?state=true", f"/supervisor/{datasource}",
                 f"/supervisor/{datasource}/status", f"/supervisor/{datasource}/stats",
                 f"/supervisor/{datasource}/health", f"/supervisor/{datasource}/history", "/supervisor/history",
                 f"/tasks?datasource={datasource}"):
        bodies.append(api.http.get(V1 + path).text)
    bodies += [api.http.get(path).text for path in ("/console/api/overview", "/metrics")]
    for sql in ("SELECT spec FROM sys.supervisors", "SELECT error_msg FROM sys.tasks"):
        for result_format in ("object", "csv"):
            answer = api.http.post("/druid/v2/sql", json={"query": sql, "resultFormat": result_format})
            assert answer.status_code == 200, answer.text
            bodies.append(answer.text)
    assert datasource in bodies[-4]  # sys.supervisors holds the spec, with its secrets masked
    bodies.append(api.post(f"/supervisor/{datasource}/terminate").text)
    bodies.append(api.http.get(V1 + "/supervisor/history").text)

    assert [i for i, body in enumerate(bodies) if SECRET in body] == []
    created = api.get("/supervisor/history")[datasource][-1]
    masked = created["spec"]["spec"]["ioConfig"]["consumerProperties"]
    assert masked == {"sasl.password": "<masked>", "client.id": "api-test", "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "PLAIN"}


def test_a_spec_read_and_sent_back_keeps_its_secret_not_the_mask(api: Api, make_topic, datasource):
    """The console's editor POSTs what GET showed: ``<masked>`` was stored as the password."""
    properties = {"sasl.username": "u", "sasl.password": SECRET, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN"}
    assert api.post("/supervisor", json=spec_json(datasource, make_topic(1),
                                                  consumerProperties=properties)).status_code == 200
    shown = api.get(f"/supervisor/{datasource}")
    assert shown["spec"]["ioConfig"]["consumerProperties"]["sasl.password"] == "<masked>"
    shown["spec"]["ioConfig"]["taskCount"] = 2  # an edit
    assert api.post("/supervisor", json=shown).status_code == 200
    [latest, *_] = api.overlord.store.history(datasource)
    assert latest.spec["spec"]["ioConfig"]["consumerProperties"]["sasl.password"] == SECRET
    assert latest.spec["spec"]["ioConfig"]["taskCount"] == 2
    api.post(f"/supervisor/{datasource}/terminate")


def test_secrets_are_learned_only_from_accepted_specs(api: Api, make_topic, monkeypatch):
    refused = spec_json("never_accepted", make_topic(1), consumerProperties={"sasl.password": "unseen-4711"},
                        taskCount=0)
    response = api.post("/supervisor", json=refused)
    assert response.status_code == 400 and "unseen-4711" not in response.text
    assert api.secrets.scrub("unseen-4711") == "unseen-4711"  # a refused body registers nothing


def test_a_provider_naming_an_unset_variable_is_refused_at_submission(api: Api, make_topic, monkeypatch):
    monkeypatch.delenv("OVERLORD_SECRET_NOT_SET", raising=False)
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "kafka.example:9092")  # the provider needs an allowed broker
    provider = {"type": "environment", "variables": {"sasl.password": "OVERLORD_SECRET_NOT_SET"}}
    response = api.post("/supervisor", json=spec_json("needs_env", make_topic(1), consumerProperties={
        "bootstrap.servers": "kafka.example:9092", "druid.dynamic.config.provider": provider}))
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["path"].endswith('.variables["sasl.password"]') and "OVERLORD_SECRET_NOT_SET is not set" in (
        error["message"])


def test_log_lines_are_scrubbed_of_known_secrets():
    registry = SecretRegistry()
    registry.learn([spec_json("ds", "t", consumerProperties={"sasl.password": SECRET})])
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    handler.addFilter(SecretLogFilter(registry))
    log = logging.getLogger("tests.api.secrets")
    log.addHandler(handler)
    try:
        log.warning("consumer failed with %s", {"sasl.password": SECRET})
        try:
            raise RuntimeError(f"bad password {SECRET}")
        except RuntimeError:
            log.exception("unexpected")
    finally:
        log.removeHandler(handler)
    assert len(lines) == 2 and all(SECRET not in line for line in lines)
    assert "<masked>" in lines[0] and "RuntimeError: bad password <masked>" in lines[1]


def test_status_health_and_stats_have_druids_shape(api: Api, make_topic, datasource):
    submit(api, spec_json(datasource, make_topic(2)))
    wait_until(lambda: api.get(f"/supervisor/{datasource}/status")["payload"]["offsetsLastUpdated"] is not None,
               "the first supervisor run", 15)

    status = api.get(f"/supervisor/{datasource}/status")
    assert status["id"] == datasource and "generationTime" in status
    payload = status["payload"]
    assert {"dataSource", "stream", "partitions", "replicas", "durationSeconds", "activeTasks", "latestOffsets",
            "minimumLag", "aggregateLag", "offsetsLastUpdated", "suspended", "healthy", "state", "detailedState",
            "recentErrors"} <= set(payload)
    assert payload["partitions"] == 2 and payload["state"] == "RUNNING"
    health = api.http.get(f"{V1}/supervisor/{datasource}/health")
    assert health.status_code == 200 and health.json()["healthy"] is True
    totals = api.get(f"/supervisor/{datasource}/stats")["0"][datasource]["totals"]["buildSegments"]
    assert totals == {"processed": 0, "unparseable": 0, "thrownAway": 0}


def test_suspend_and_resume_flip_suspended(api: Api, make_topic, datasource):
    submit(api, spec_json(datasource, make_topic(1)))

    suspended = api.post(f"/supervisor/{datasource}/suspend")
    assert suspended.status_code == 200 and suspended.json()["suspended"] is True
    assert suspended.json()["spec"]["dataSchema"]["dataSource"] == datasource
    assert api.get(f"/supervisor/{datasource}/status")["payload"]["state"] == "SUSPENDED"
    again = api.post(f"/supervisor/{datasource}/suspend")
    assert again.status_code == 400 and "already suspended" in again.json()["errorMessage"]

    resumed = api.post(f"/supervisor/{datasource}/resume")
    assert resumed.status_code == 200 and resumed.json()["suspended"] is False
    assert api.get(f"/supervisor/{datasource}/status")["payload"]["state"] != "SUSPENDED"
    assert [h["suspended"] for h in api.get(f"/supervisor/{datasource}/history")] == [False, True, False]


def produce_and_see(api: Api, datasource: str, topic: str, partition: str) -> None:
    """Produce 5 records to a suspended supervisor's one-partition topic and wait until its status sees them."""
    produce(api.overlord.settings.kafka_bootstrap_servers, topic, make_sample_events(5, bad_every=0).records, 1)
    wait_until(lambda: api.get(f"/supervisor/{datasource}/status")["payload"]["latestOffsets"].get(partition) == 5,
               "the 5 records to be seen", 15)


def test_reset_offsets_checks_the_stream_and_sets_offsets(api: Api, make_topic, datasource):
    topic = make_topic(1)
    submit(api, spec_json(datasource, topic, useEarliestOffset=True))
    wait_until(lambda: api.get(f"/supervisor/{datasource}/status")["payload"]["latestOffsets"] != {},
               "the partitions to be seen", 15)
    api.post(f"/supervisor/{datasource}/suspend")  # no task may publish over the offsets set below
    produce_and_see(api, datasource, topic, "0")

    def reset(stream: str, offsets: dict[str, int]) -> httpx.Response:
        return api.post(f"/supervisor/{datasource}/resetOffsets", json={
            "type": "kafka", "partitions": {"type": "end", "stream": stream, "partitionOffsetMap": offsets}})

    wrong = reset("not-the-topic", {"0": 3})
    assert wrong.status_code == 400 and [e["path"] for e in wrong.json()["errors"]] == ["partitions.stream"]
    unknown = reset(topic, {"7": 3})
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["path"] == 'partitions.partitionOffsetMap["7"]'
    beyond = reset(topic, {"0": 6})  # past the latest offset (5): it would only stop the partition
    assert beyond.status_code == 400 and beyond.json()["errors"][0]["path"] == 'partitions.partitionOffsetMap["0"]'
    assert "latest offset 5" in beyond.json()["errorMessage"]
    negative = reset(topic, {"0": -1})
    assert negative.status_code == 400 and negative.json()["errors"][0]["path"].startswith("partitions.partition")
    missing = api.post(f"/supervisor/{datasource}/resetOffsets", json={"type": "kafka", "partitions": {}})
    assert missing.status_code == 400
    assert {e["path"] for e in missing.json()["errors"]} == {"partitions.stream", "partitions.partitionOffsetMap"}

    assert reset(topic, {"0": 3}).json() == {"id": datasource}
    stored = committed_offsets(api.engine, datasource)
    assert stored is not None and dict(stored.offsets) == {0: 3}
    assert api.post(f"/supervisor/{datasource}/reset").json() == {"id": datasource}
    stored = committed_offsets(api.engine, datasource)
    assert stored is None or dict(stored.offsets) == {}


def test_terminate_removes_the_supervisor_and_leaves_a_tombstone(api: Api, make_topic, datasource):
    submit(api, spec_json(datasource, make_topic(1)))

    assert api.post(f"/supervisor/{datasource}/terminate").json() == {"id": datasource}

    assert datasource not in api.get("/supervisor")
    assert api.http.get(f"{V1}/supervisor/{datasource}/status").status_code == 404
    history = api.get(f"/supervisor/{datasource}/history")
    assert [h["terminated"] for h in history] == [True, False]
    assert history[0]["spec"]["spec"]["ioConfig"] and history[0]["version"] >= history[1]["version"]
    assert api.get("/supervisor/history")[datasource][0]["terminated"] is True
    assert api.post(f"/supervisor/{datasource}/terminate").status_code == 404


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/supervisor/nope"), ("GET", "/supervisor/nope/status"), ("GET", "/supervisor/nope/health"),
    ("GET", "/supervisor/nope/stats"), ("GET", "/supervisor/nope/history"), ("POST", "/supervisor/nope/suspend"),
    ("POST", "/supervisor/nope/resume"), ("POST", "/supervisor/nope/reset"), ("POST", "/supervisor/nope/terminate"),
    ("GET", "/task/nope"), ("GET", "/task/nope/status"), ("POST", "/task/nope/shutdown"),
])
def test_unknown_ids_are_404(api: Api, method: str, path: str):
    response = api.http.request(method, V1 + path)
    assert response.status_code == 404 and "nope" in response.json()["errorMessage"]


def test_unexpected_errors_are_500_with_a_logged_traceback(api: Api, monkeypatch, caplog):
    def broken(**_kwargs: Any) -> None:
        raise RuntimeError("metadata store on fire")

    monkeypatch.setattr(api.overlord.store, "tasks", broken)
    with caplog.at_level(logging.ERROR, logger="overlord.http.app"):
        response = api.http.get(f"{V1}/tasks")
    assert response.status_code == 500 and "error" in response.json()
    assert any(r.exc_info and "metadata store on fire" in str(r.exc_info[1]) for r in caplog.records)


# --- the data loader: sampler and validate-only --------------------------------------------------


def sampled(api: Api, spec: dict[str, Any], **config: int) -> httpx.Response:
    return api.post("/sampler", json={"type": "kafka", "spec": spec["spec"], "samplerConfig": config})


def test_the_sampler_shows_each_record_as_parsed_and_the_rollup_a_task_would_write(api: Api, stack: DevStack,
                                                                                  make_topic, datasource):
    topic = make_topic(1)
    events = make_sample_events(60, bad_every=20)
    produce(stack.bootstrap_servers, topic, events.records, 1)

    answer = sampled(api, spec_json(datasource, topic), numRows=500)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["numRowsRead"] == len(events.records) == 63 and body["numRowsIndexed"] == 60
    expected_rollup: dict[tuple[int, str, str], list[float]] = {}
    for offset, (record, item) in enumerate(zip(events.records, body["data"], strict=True)):
        assert (item["partition"], item["offset"]) == (0, offset)
        try:
            event = json.loads(record)
        except ValueError:
            assert item["raw"] == record.decode() and "input" not in item and item["unparseable"] is True
            assert item["error"] == "invalid JSON"
            continue
        assert item["input"] == event
        if "ts" not in event:
            assert item["unparseable"] is True and "timestamp" in item["error"]
            continue
        minute = int(datetime.fromisoformat(event["ts"]).timestamp()) // 60 * 60_000  # queryGranularity MINUTE
        assert item["parsed"] == {"__time": minute, "country": event["country"], "device": event["device"],
                                  "count": 1, "value_sum": event["value"], "value_min": event["value"],
                                  "value_max": event["value"], "price_sum": event["price"]}
        sums = expected_rollup.setdefault((minute, event["country"], event["device"]), [0, 0, 0.0])
        sums[0], sums[1], sums[2] = sums[0] + 1, sums[1] + event["value"], sums[2] + event["price"]
    rolled = {(r["__time"], r["country"], r["device"]): [r["count"], r["value_sum"], r["price_sum"]]
              for r in body["rollup"]["rows"]}
    assert rolled.keys() == expected_rollup.keys()
    for key, (count, value, price) in expected_rollup.items():
        assert rolled[key][:2] == [count, value] and rolled[key][2] == pytest.approx(price)
    assert [c["name"] for c in body["logicalSegmentSchema"]] == [
        "__time", "country", "device", "count", "value_sum", "value_min", "value_max", "price_sum"]
    assert committed_offsets(api.engine, datasource) is None and datasource not in api.get("/supervisor")


def test_the_sampler_shares_its_rows_across_partitions_from_the_latest_or_the_earliest(api: Api, stack: DevStack,
                                                                                      make_topic, datasource,
                                                                                      monkeypatch):
    topic = make_topic(2)
    produce(stack.bootstrap_servers, topic, make_sample_events(40, bad_every=0).records, 2)  # 20 per partition

    latest = sampled(api, spec_json(datasource, topic, useEarliestOffset=False), numRows=10).json()["data"]
    assert sorted((d["partition"], d["offset"]) for d in latest) == [(p, o) for p in (0, 1) for o in range(15, 20)]
    earliest = sampled(api, spec_json(datasource, topic), numRows=7).json()["data"]
    assert sorted((d["partition"], d["offset"]) for d in earliest) == [(0, o) for o in range(4)] + [(1, o) for o in
                                                                                                 range(3)]
    # records of ~110 bytes: the read stops past 1,000
    monkeypatch.setattr("overlord.supervisor.sampler.MAX_BYTES", 1_000)
    capped = sampled(api, spec_json(datasource, topic), numRows=40).json()
    assert 9 <= capped["numRowsRead"] <= 20, capped["numRowsRead"]


@pytest.mark.parametrize(("change", "path"), [
    (lambda body: body["samplerConfig"].update(numRows=5001), "samplerConfig.numRows"),
    (lambda body: body["samplerConfig"].update(timeoutMs="soon"), "samplerConfig.timeoutMs"),
    (lambda body: body["spec"]["ioConfig"].update(topic="no-such-topic-here"), "spec.ioConfig.topic"),
    (lambda body: body["spec"]["ioConfig"]["consumerProperties"].update({"debug": "all"}),
     "spec.ioConfig.consumerProperties.debug"),
    (lambda body: body["spec"]["dataSchema"]["metricsSpec"].append({"type": "longSum"}),
     "spec.dataSchema.metricsSpec[5]"),
])
def test_a_bad_sampler_request_is_a_400_naming_its_path(api: Api, make_topic, datasource, change, path):
    body = {"type": "kafka", "spec": spec_json(datasource, make_topic(1))["spec"], "samplerConfig": {}}
    body["spec"]["ioConfig"]["consumerProperties"] = {}
    change(body)
    answer = api.post("/sampler", json=body)
    assert answer.status_code == 400, answer.text
    assert any(e["path"].startswith(path) for e in answer.json()["errors"]), answer.json()


def test_validate_only_checks_what_a_submit_checks_and_changes_nothing(api: Api, make_topic, datasource):
    topic = make_topic(1)
    checked = api.post("/supervisor", params={"validateOnly": "true"}, json=spec_json(datasource, topic))
    assert checked.status_code == 200 and checked.json() == {"id": datasource, "valid": True, "ignoredFields": []}
    assert datasource not in api.get("/supervisor")
    bad = spec_json(datasource, topic, taskCount=0)
    refused = api.post("/supervisor", params={"validateOnly": "true"}, json=bad)
    assert refused.status_code == 400 and refused.json()["errors"][0]["path"] == "spec.ioConfig.taskCount"

    submit(api, spec_json(datasource, topic))  # an update a submit refuses is refused alike, and nothing changes
    retyped = spec_json(datasource, topic, taskCount=2)
    retyped["spec"]["dataSchema"]["metricsSpec"][1]["type"] = "doubleSum"
    refused = api.post("/supervisor", params={"validateOnly": "true"}, json=retyped)
    assert refused.status_code == 400 and refused.json()["errors"][0]["path"] == "spec.dataSchema.metricsSpec[1].type"
    retyped["spec"]["dataSchema"]["metricsSpec"][1]["type"] = "longSum"
    assert api.post("/supervisor", params={"validateOnly": "true"}, json=retyped).status_code == 200
    assert api.get(f"/supervisor/{datasource}")["spec"]["ioConfig"]["taskCount"] == 1


# --- ingestion, tasks, console, metrics ------------------------------------------------------


def test_the_consoles_task_list_pages_newest_first_and_filters_on_the_server(api: Api, datasource):
    store = api.overlord.store
    ids = [f"task_{datasource}_{i:03d}" for i in range(120)]
    for i, task_id in enumerate(ids):
        store.insert_task(task_id, datasource, datasource, {0: i}, {0: i + 1}, task_type="compact" if i % 3 else
                          "index_kafka")
        if i % 10 == 0:
            store.finish_task(task_id, "FAILED", "broken", None)

    def page(number: int, **filters: Any) -> dict[str, Any]:
        answer = api.http.get("/console/api/tasks", params={"datasource": datasource, "page": number, **filters})
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    pages = [page(n) for n in range(3)]
    assert [(len(p["tasks"]), p["more"]) for p in pages] == [(50, True), (50, True), (20, False)]
    assert [t["id"] for p in pages for t in p["tasks"]] == ids[::-1]  # every task once, newest first
    failed = page(0, status="FAILED")["tasks"]
    assert [t["id"] for t in failed] == [i for i in ids[::-1] if int(i[-3:]) % 10 == 0]
    assert all(t["errorMsg"] == "broken" for t in failed)
    kafka = page(0, type="index_kafka")["tasks"]
    assert [t["id"] for t in kafka] == [i for i in ids[::-1] if int(i[-3:]) % 3 == 0]
    assert page(0, sinceSeconds=3600)["tasks"] == pages[0]["tasks"]  # all created just now
    assert api.http.get("/console/api/tasks", params={"status": "LOST"}).status_code == 400
    too_far = api.http.get("/console/api/tasks", params={"sinceSeconds": 2**46})  # before year 1: was a 500
    assert too_far.status_code == 400 and "sinceSeconds" in too_far.text


def test_a_tasks_log_and_report_are_one_call_away_as_druid_serves_them(api: Api, stack: DevStack, make_topic,
                                                                        datasource):
    topic = make_topic(1)
    sample = make_sample_events(200, bad_every=20)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    submit(api, spec_json(datasource, topic))
    wait_until(lambda: [t for t in api.get("/tasks", datasource=datasource) if t["status"] == "SUCCESS"],
               "a task to publish", 60)
    [task] = [t for t in api.get("/tasks", datasource=datasource) if t["status"] == "SUCCESS"][-1:]
    task_id = task["id"]

    log = api.http.get(f"{V1}/task/{task_id}/log")
    assert log.status_code == 200 and log.headers["content-type"].startswith("text/plain")
    lines = log.text.splitlines()
    assert any(f"launched task {task_id}" in line for line in lines)  # the supervisor's line that names it
    assert any(f"task {task_id}: indexing {datasource}" in line for line in lines)  # the task's own thread
    assert f"task {task_id} SUCCESS: published" in lines[-1]
    assert api.http.get(f"{V1}/task/{task_id}/log", params={"offset": -40}).text == log.text[-40:]
    other = api.get("/tasks", datasource=datasource)
    assert all(task_id not in line for t in other if t["id"] != task_id
               for line in api.http.get(f"{V1}/task/{t['id']}/log").text.splitlines())  # one task's lines only

    payload = api.get(f"/task/{task_id}/reports")["ingestionStatsAndErrors"]
    assert payload["type"] == "ingestionStatsAndErrors" and payload["taskId"] == task_id
    report = api.get(f"/task/{task_id}")["payload"]["report"]
    stats = payload["payload"]["rowStats"]["buildSegments"]
    assert (stats["processed"], stats["unparseable"], stats["thrownAway"]) == (
        report["processed"], report["unparseable"], report["thrownAway"])
    assert payload["payload"]["ingestionState"] == "COMPLETED" and stats["unparseable"] >= 1
    assert payload["payload"]["unparseableEvents"]["buildSegments"][0].startswith("partition 0 offset ")
    assert api.http.get(f"{V1}/task/nope/log").status_code == 404
    assert api.http.get(f"{V1}/task/nope/reports").status_code == 404


def test_ingestion_shows_in_status_tasks_console_and_metrics(api: Api, stack: DevStack, make_topic, datasource):
    topic = make_topic(2)
    sample = make_sample_events(300, bad_every=0)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    submit(api, spec_json(datasource, topic))

    def caught_up() -> bool:
        payload = api.get(f"/supervisor/{datasource}/status")["payload"]
        return (payload["aggregateLag"] == 0 and payload["committedOffsets"] == {"0": 150, "1": 150}
                and not api.get("/tasks", datasource=datasource, state="running"))  # marked done after publishing

    wait_until(caught_up, "the supervisor to publish everything produced", 60)

    tasks = api.get("/tasks", datasource=datasource)
    assert tasks and {t["dataSource"] for t in tasks} == {datasource}
    assert {t["status"] for t in tasks} == {"SUCCESS"} and all(t["duration"] >= 0 for t in tasks)
    assert {t["id"] for t in api.get("/tasks", datasource=datasource, state="complete")} == {t["id"] for t in tasks}
    assert api.get("/tasks", datasource=datasource, state="failed") == []
    assert all(t["status"] == "RUNNING" for t in api.get("/tasks", datasource=datasource, state="running"))
    bad_state = api.http.get(f"{V1}/tasks", params={"state": "bogus"})
    assert bad_state.status_code == 400 and bad_state.json()["errors"][0]["path"] == "state"
    task_id = tasks[-1]["id"]
    task = api.get(f"/task/{task_id}")
    assert task["task"] == task_id and task["payload"]["dataSource"] == datasource
    assert task["payload"]["report"]["publish"] == "ok"
    status = api.get(f"/task/{task_id}/status")
    assert status["task"] == task_id and status["status"]["status"] == "SUCCESS"
    druid_keys = {"id", "createdTime", "statusCode", "duration", "location", "dataSource", "errorMsg"}
    assert druid_keys <= set(status["status"])
    assert api.post(f"/task/{task_id}/shutdown").json() == {"task": task_id}
    processed = api.get(f"/supervisor/{datasource}/stats")["0"][datasource]["totals"]["buildSegments"]["processed"]
    assert processed == 300

    assert datasource in api.http.get("/druid/v2/datasources").json()
    assert api.http.get(f"/druid/v2/datasources/{datasource}").json() == {
        "dimensions": ["country", "device"], "metrics": ["count", "value_sum", "value_min", "value_max", "price_sum"]}
    assert api.http.get("/druid/v2/datasources/nope").status_code == 404

    page = api.http.get("/")  # the console; tests/test_console.py drives it in a browser
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    overview = api.http.get("/console/api/overview").json()
    [shown] = [s for s in overview["supervisors"] if s["id"] == datasource]
    assert shown["payload"]["aggregateLag"] == 0 and shown["series"]["points"]
    series = api.get(f"/supervisor/{datasource}/series")  # an hour in 10-s steps: what the charts draw
    assert series["stepSeconds"] == 10 and all(p["t"] % 10 == 0 for p in series["points"])
    assert sum(p["published"] for p in series["points"]) == len([t for t in tasks if t["status"] == "SUCCESS"])
    assert all(p["lagMin"] <= p["lag"] <= p["lagMax"] for p in series["points"] if p["lag"] is not None)
    [segments] = [d for d in overview["datasources"] if d["name"] == datasource]
    assert segments["rows"] == sum(i["rows"] for i in segments["intervals"]) > 0
    metrics = api.http.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}  # the library's own parser

    def value(family: str, sample: str = "", **labels: str) -> float:
        [found] = [s.value for s in families[family].samples
                   if s.name == (sample or family) and labels.items() <= s.labels.items()]
        return found

    ours = {"datasource": datasource}
    assert value("overlord_supervisor_lag_records", topic=topic, partition="0", **ours) == 0
    assert value("overlord_supervisor_lag_seconds", topic=topic, partition="0", **ours) == 0
    assert value("overlord_supervisor_state", state="RUNNING", **ours) == 1
    assert value("overlord_records", "overlord_records_total", kind="processed", **ours) == 300
    assert value("overlord_supervisor_healthy", **ours) == 1
    published = value("overlord_publishes", "overlord_publishes_total", outcome="ok", **ours)
    assert published == len([t for t in tasks if t["status"] == "SUCCESS"]) >= 1
    assert families["overlord_task_duration_seconds"].type == "histogram"
    assert value("overlord_task_duration_seconds", "overlord_task_duration_seconds_count", **ours) == published
    assert value("overlord_publish_duration_seconds", "overlord_publish_duration_seconds_count", **ours) == published
    assert value("overlord_segments_published", "overlord_segments_published_total", **ours) >= 1
    assert value("overlord_segment_bytes_published", "overlord_segment_bytes_published_total", **ours) > 0
    assert "process_resident_memory_bytes" in families and "python_gc_objects_collected" in families
    assert 0 < time.time() - value("overlord_last_publish_timestamp_seconds", **ours) < 120
    shown = visible_segments(api.overlord.engine, datasource)
    assert value("overlord_visible_segments", **ours) == len(shown) >= 1
    assert value("overlord_visible_segment_bytes", **ours) == sum(s.size_bytes for s in shown)
    assert value("overlord_leader") == 1 and value("overlord_leader_epoch") == api.overlord.elector.epoch >= 1
    assert value("overlord_task_slots") == api.overlord.settings.task_slots
    assert value("overlord_compaction_task_slots") == api.overlord.settings.compaction_task_slots
    sent = value("overlord_resident_runner_requests", "overlord_resident_runner_requests_total")
    assert (sent, value("overlord_resident_runner_tasks", "overlord_resident_runner_tasks_total")) == (
        api.overlord.runner.resident.requests_sent, api.overlord.runner.resident.tasks_sent) and sent >= 1
    assert value("overlord_build_info", version=package_version()) == 1
    status_route = "/druid/indexer/v1/supervisor/{supervisor_id}/status"
    assert value("overlord_http_requests", "overlord_http_requests_total", method="GET", route=status_route,
                 status="200") >= 1  # the route's template, not the path sent
    assert not [s for s in families["overlord_http_requests"].samples if datasource in s.labels.get("route", "")]
    documented = (Path(__file__).parents[1] / "docs" / "operations.md").read_text()
    undocumented = [f for f in families if f.startswith("overlord_") and f"`{f}" not in documented]
    assert not undocumented, f"the metrics table of docs/operations.md lacks {undocumented}"


@pytest.mark.parametrize("path", [f"{V1}/tasks?datasource=%00", f"{V1}/supervisor/a%00b/history",
                                  f"{V1}/task/%00/status"])
def test_a_nul_character_in_the_url_is_a_400_not_a_database_error(api: Api, path: str):
    """Found by the schemathesis run: PostgreSQL text cannot hold NUL, and the query failed with a 500."""
    answer = api.http.get(path)
    assert answer.status_code == 400 and "NUL" in answer.json()["errorMessage"]


def test_health_and_openapi(api: Api):
    health = api.http.get("/health")
    assert health.status_code == 200 and health.json()["healthy"] is True
    openapi = api.http.get("/openapi.json").json()
    assert {f"{V1}/supervisor", f"{V1}/supervisor/{{supervisor_id}}/resetOffsets", f"{V1}/tasks", "/metrics"} <= set(
        openapi["paths"])
    assert "SupervisorSpec" in openapi["components"]["schemas"]

    docs = api.http.get("/docs")  # the console's "API" link: rendered here, nothing from a CDN
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert all(path in docs.text for path in openapi["paths"])
    assert "<script" not in docs.text and not re.search(r'(src|href)="(https?:)?//', docs.text)
    assert "POST /druid/indexer/v1/supervisor</code>" in docs.text
    assert api.http.get("/redoc").status_code == 404


# --- the command line ---------------------------------------------------------------------------


def test_cli_client_against_the_server(api: Api, stack: DevStack, make_topic, datasource, tmp_path: Path):
    topic = make_topic(2)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_json(datasource, topic)))
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(spec_json(datasource, "t", taskCount=-1)))

    submitted = overlord_cli("supervisor", "submit", str(spec_file), "--url", api.url)
    assert submitted.returncode == 0, submitted.stderr
    assert f"supervisor {datasource} submitted" in submitted.stdout
    listed = overlord_cli("supervisor", "list", env={"OVERLORD_URL": api.url})
    assert listed.returncode == 0 and datasource in listed.stdout and "state" in listed.stdout
    sample = make_sample_events(200, bad_every=0)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    wait_until(lambda: committed_total(api.engine, datasource) == 200, "the publish", 60)
    wait_until(lambda: api.get(f"/supervisor/{datasource}/status")["payload"]["aggregateLag"] == 0, "lag 0", 15)
    status = overlord_cli("supervisor", "status", datasource, "--url", api.url)
    assert status.returncode == 0, status.stderr
    assert f"supervisor {datasource}: RUNNING" in status.stdout and "aggregate lag 0" in status.stdout
    assert "partition  committed  latest  lag" in status.stdout and "active tasks:" in status.stdout
    watch = subprocess.Popen([sys.executable, "-m", "overlord.cli", "supervisor", "status", datasource, "--watch",
                              "--every", "0.2", "--url", api.url], stdout=subprocess.PIPE, text=True)
    redraws = 0
    for line in watch.stdout or ():
        redraws += "Ctrl-C stops" in line
        if redraws == 3:
            break
    watch.send_signal(signal.SIGINT)
    assert watch.wait(30) == 0 and redraws == 3
    suspended = overlord_cli("supervisor", "suspend", datasource, "--url", api.url)
    assert suspended.returncode == 0 and f"supervisor {datasource} suspended" in suspended.stdout
    history = overlord_cli("supervisor", "history", datasource, "--url", api.url)
    assert history.returncode == 0 and history.stdout.splitlines()[1].endswith("suspended")
    stats = overlord_cli("supervisor", "stats", datasource, "--url", api.url)
    assert stats.returncode == 0 and stats.stdout.splitlines()[1].split() == ["total", "200", "0", "0"], stats.stdout
    assert "records/s: 1m " in stats.stdout
    tasks = overlord_cli("supervisor", "tasks", "--datasource", datasource, "--url", api.url)
    assert tasks.returncode == 0 and "index_kafka" in tasks.stdout and "SUCCESS" in tasks.stdout
    reset = overlord_cli("supervisor", "reset-offsets", datasource, "0=40", "--url", api.url)
    assert reset.returncode == 0 and "set to 0:40" in reset.stdout, reset.stderr
    assert committed_offsets(api.engine, datasource).offsets == {0: 40, 1: 100}
    not_offsets = overlord_cli("supervisor", "reset-offsets", datasource, "zero", "--url", api.url)
    assert not_offsets.returncode == 2 and "expected PARTITION=OFFSET" in not_offsets.stderr
    compacted = overlord_cli("supervisor", "compact", datasource, "--url", api.url)
    assert compacted.returncode == 0 and compacted.stdout.startswith("compaction task"), compacted.stderr
    assert compacted.stderr == ""  # no progress for scripts
    terminal, stderr_end = os.openpty()  # on a terminal, a compaction shows its progress on stderr
    on_a_terminal = subprocess.run([sys.executable, "-m", "overlord.cli", "supervisor", "compact", datasource,
                                    "--url", api.url], stdout=subprocess.PIPE, stderr=stderr_end, text=True,
                                   timeout=300)
    os.close(stderr_end)
    shown = os.read(terminal, 1 << 16).decode()
    os.close(terminal)
    assert on_a_terminal.returncode == 0 and on_a_terminal.stdout.startswith("compaction task")
    assert f"compacting {datasource}: 0 s  starting" in shown, shown

    bad = overlord_cli("supervisor", "submit", str(bad_file), "--url", api.url)
    assert bad.returncode == 2 and "HTTP 400" in bad.stderr and "spec.ioConfig.taskCount" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = overlord_cli("supervisor", "status", "nope", "--url", api.url)
    assert missing.returncode == 2 and "HTTP 404" in missing.stderr and "no supervisor 'nope'" in missing.stderr
    unreachable = overlord_cli("supervisor", "list", "--url", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1 and "cannot reach the overlord" in unreachable.stderr
    terminated = overlord_cli("supervisor", "terminate", datasource, "--url", api.url)
    assert terminated.returncode == 0 and datasource not in api.get("/supervisor")


def test_the_cli_for_scripts_prints_json_exits_by_one_scheme_and_keeps_stderr_quiet(
        api: Api, stack: DevStack, make_topic, datasource, tmp_path: Path):
    topic = make_topic(2)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_json(datasource, topic)))
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(spec_json(datasource, "t", taskCount=-1)))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return overlord_cli("supervisor", *args, "--url", api.url)

    submitted = cli("submit", str(spec_file), "--json")
    assert submitted.returncode == 0 and json.loads(submitted.stdout)["id"] == datasource, submitted.stderr
    assert submitted.stderr == ""  # no library log lines (httpx's INFO) unless -v
    produce(stack.bootstrap_servers, topic, make_sample_events(100, bad_every=0).records, 2)
    wait_until(lambda: sum(api.get(f"/supervisor/{datasource}/status")["payload"]["committedOffsets"].values())
               == 100, "the publish, as the status shows it (a run after it)", 60)
    status = json.loads(cli("status", datasource, "--json").stdout)
    assert status["id"] == datasource and sum(status["payload"]["committedOffsets"].values()) == 100
    assert datasource in [entry["id"] for entry in json.loads(cli("list", "--json").stdout)]
    assert json.loads(cli("history", datasource, "--json").stdout)[0]["version"]
    assert json.loads(cli("stats", datasource, "--json").stdout)
    assert json.loads(cli("tasks", "--datasource", datasource, "--json").stdout)[0]["dataSource"] == datasource
    sql = f'SELECT COUNT(*) AS n, SUM("count") AS events FROM "{datasource}"'
    asked = overlord_cli("query", sql, "--url", api.url, "--json")  # through the running overlord, no Spark here
    assert asked.returncode == 0 and json.loads(asked.stdout)[0]["events"] == 100, asked.stderr
    table = overlord_cli("query", sql, "--url", api.url).stdout.splitlines()
    assert table[0].split() == ["n", "events"] and table[-1] == "(1 row)" and table[1].split()[1] == "100"
    wrong = overlord_cli("query", "SELECT * FROM nowhere", "--url", api.url)
    assert wrong.returncode == 2 and wrong.stderr.startswith("query failed: the overlord answered HTTP 400")

    latest = status["payload"]["latestOffsets"]["0"]
    beyond = cli("reset-offsets", datasource, "0=99999999")  # would halt the partition: refused, naming it
    assert beyond.returncode == 2 and 'partitions.partitionOffsetMap["0"]' in beyond.stderr, beyond.stderr
    assert f"latest offset {latest}" in beyond.stderr
    assert committed_offsets(api.engine, datasource).offsets == {0: latest, 1: 100 - latest}

    # one exit-code scheme: 2 the request was refused (fix it), 1 the service failed or was unreachable
    assert cli("submit", str(bad_file)).returncode == 2
    assert cli("status", "nope").returncode == 2
    assert overlord_cli("supervisor", "list", "--url", f"http://127.0.0.1:{free_port()}").returncode == 1
    assert cli("suspend-all").returncode == 0 and api.get(f"/supervisor/{datasource}/status")["payload"]["suspended"]
    assert cli("resume-all").returncode == 0 and not api.get(f"/supervisor/{datasource}/status")["payload"][
        "suspended"]
    assert cli("terminate-all", "--json").returncode == 0 and api.get("/supervisor") == []


def test_cli_partition_offsets_address_a_topic_patterns_partitions():
    from overlord.cli.client import _partition_offset

    assert _partition_offset("0=1500") == ("0", 1500)
    assert _partition_offset("clicks-eu:3=7") == ("clicks-eu:3", 7)
    for wrong in ("zero", "0=-1", "bad topic:0=1", ":0=1", "t:x=1"):
        with pytest.raises(argparse.ArgumentTypeError, match="PARTITION=OFFSET"):
            _partition_offset(wrong)


def test_overlord_serve_logs_json_answers_and_stops_cleanly_on_sigterm(stack: DevStack, engine: sa.Engine, make_topic,
                                                             tmp_path: Path):
    port, grace_s = free_port(), 5
    env = {**os.environ, **stack.as_env(), "OVERLORD_DATABASE_URL": fresh_database(engine),
           "OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"), "OVERLORD_SPARK_MASTER": "local[1]"}
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "overlord.cli", "--log-format", "json", "serve", "--port", str(port),
             "--shutdown-grace", str(grace_s), "--insecure-open"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        def answers() -> bool:
            assert process.poll() is None, log_path.read_text()
            try:
                return httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, "overlord serve to answer /health", 60)
        spec = spec_json(f"ds_{uuid.uuid4().hex[:8]}", make_topic(1))
        assert httpx.post(f"{url}{V1}/supervisor", json=spec, timeout=30).status_code == 200

        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=grace_s + 25)
        took = time.monotonic() - stopping
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = log_path.read_text()
    assert code == 0, output
    assert took < grace_s + 20
    jvm_notice = "WARNING: Using incubator modules: jdk.incubator.vector"  # the java launcher's, before any logger
    lines = [json.loads(line) for line in output.splitlines() if line != jvm_notice]  # Spark's JVM's too
    messages = [line.get("message", "") for line in lines]
    assert "overlord stopped" in messages and "Traceback" not in output
    assert {"level", "logger", "time"} <= lines[0].keys()
    assert any(m.startswith("audit: POST /druid/indexer/v1/supervisor by anonymous") for m in messages)


# --- queries and compaction over HTTP ----------------------------------------------------------


def test_sql_and_compaction_endpoints(api: Api, stack: DevStack, make_topic, datasource):
    topic = make_topic(2)
    sample = make_sample_events(3_000)
    submit(api, spec_json(datasource, topic))
    for part in (sample.records[:1_500], sample.records[1_500:]):  # two tasks: two files per interval to compact
        produce(stack.bootstrap_servers, topic, part, 2)
        wanted = sample.records.index(part[-1]) + 1
        wait_until(lambda n=wanted: committed_total(api.engine, datasource) == n, "ingestion", 90)
    query = f'SELECT country, SUM("count") AS events, SUM(value_sum) AS v FROM "{datasource}" GROUP BY country'

    def ask(result_format: str = "object", sql: str = query) -> httpx.Response:
        return api.http.post("/druid/v2/sql", json={"query": sql, "resultFormat": result_format,
                                                    "header": result_format != "object"})

    rows = ask().json()
    assert {r["country"]: (r["events"], r["v"]) for r in rows} == {
        c: (n, sample.value_by_country[c]) for c, n in sample.count_by_country.items()}
    assert ask("array").json()[0] == ["country", "events", "v"]  # header row
    assert ask("csv").text.splitlines()[0] == "country,events,v"
    first = api.http.post("/druid/v2/sql", json={"query": query + " ORDER BY country", "context": {"sqlOuterLimit": 1}})
    assert first.json() == sorted(rows, key=lambda r: r["country"])[:1]
    second_hour = query.replace("GROUP BY", "WHERE __time >= TIMESTAMP '2026-11-01 01:00:00' GROUP BY")
    [explained] = ask(sql=f"EXPLAIN PLAN FOR {second_hour}").json()  # reads only the second hour's segments
    segments = visible_segments(api.engine, datasource)
    later = [s for s in segments if s.interval_start >= datetime(2026, 11, 1, 1, tzinfo=UTC)]
    assert 0 < len(later) < len(segments)
    assert json.loads(explained["PLAN"])["datasources"][datasource] == {
        "segments": len(segments), "segmentsRead": len(later), "bytesRead": sum(s.size_bytes for s in later)}

    for bad in ["SELEC 1", f'DROP TABLE "{datasource}"', "SELECT * FROM no_such_datasource",
                "SELECT reflect('java.lang.System', 'exit', '0')"]:
        response = ask(sql=bad)
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["error"] == "druidException" and response.json()["errorMessage"]

    api.overlord.set_suspended(datasource, True)  # no appends while we compare
    compacted = api.http.post(f"/druid/indexer/v1/compact/{datasource}", json={})
    assert compacted.status_code == 200, compacted.text
    statuses = [i["status"] for i in compacted.json()["intervals"]]
    print("compaction statuses", statuses)
    assert statuses and set(statuses) == {"ok"}, compacted.text
    assert {r["country"]: (r["events"], r["v"]) for r in ask().json()} == {
        r["country"]: (r["events"], r["v"]) for r in rows}
    assert api.http.post("/druid/indexer/v1/compact/no_such_ds", json={}).status_code == 404


def test_an_expensive_query_beside_a_supervisor_times_out_and_ingestion_stays_exact(
        api: Api, stack: DevStack, make_topic, datasource):
    """A query of 10^12 pairs runs while a supervisor ingests: it is cancelled at its timeout, with a 400
    naming the limit, and every record is published exactly once.
    """
    topic = make_topic(2)
    submit(api, spec_json(datasource, topic))
    heavy = {"query": "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b WHERE a.id * 7 + b.id = 3",
             "context": {"timeout": 8_000, "sqlQueryId": "heavy-1"}}
    answers: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: answers.append(api.http.post("/druid/v2/sql", json=heavy)))
    asking.start()
    sample = make_sample_events(5_000, bad_every=0)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    wait_until(lambda: committed_total(api.engine, datasource) == len(sample.records), "ingestion", 120)
    asking.join(60)
    [answer] = answers
    assert answer.status_code == 400 and answer.json()["context"]["errorClass"] == "QUERY_TIMEOUT", answer.text
    assert "8,000 ms" in answer.json()["errorMessage"]
    assert_exact(published_table(api.engine, datasource), sample)


def test_bodies_past_the_size_limit_get_413_whether_declared_or_chunked(api: Api):
    limit = api.overlord.settings.http_max_body_bytes
    big = b'{"query": "SELECT 1", "pad": "' + b"x" * limit + b'"}'
    declared = api.http.post("/druid/v2/sql", content=big, headers={"Content-Type": "application/json"})
    chunked = api.http.post("/druid/v2/sql", content=iter([big[:1000], big[1000:]]),
                            headers={"Content-Type": "application/json"})
    for response in (declared, chunked):
        assert response.status_code == 413 and "OVERLORD_HTTP_MAX_BODY_BYTES" in response.json()["errorMessage"]
    small = api.http.post("/druid/v2/sql", content=iter([b'{"query": ', b'"SELECT 1 AS one"}']),
                          headers={"Content-Type": "application/json"})
    assert small.status_code == 200 and small.json() == [{"one": 1}]


def test_druid_status_endpoints_and_the_sql_path_pydruid_uses(api: Api):
    status = api.http.get("/status")
    assert status.status_code == 200 and status.json()["version"] not in ("", None)
    health = api.http.get("/status/health")
    assert health.status_code == 200 and health.json() is True
    answer = api.http.post("/druid/v2/sql/", json={"query": "SELECT 2 AS two"}, follow_redirects=False)
    assert answer.status_code == 200 and answer.json() == [{"two": 2}]



DRUID_ERROR_KEYS = {"error", "errorCode", "persona", "category", "errorMessage", "context"}


@pytest.mark.parametrize("method, path, body, status, category", [
    ("GET", V1 + "/supervisor/no_such_id", None, 404, "NOT_FOUND"),
    ("POST", V1 + "/supervisor", {"type": "kafka"}, 400, "INVALID_INPUT"),
    ("POST", V1 + "/supervisor/no_such_id/suspend", None, 404, "NOT_FOUND"),
    ("GET", V1 + "/tasks?state=bogus", None, 400, "INVALID_INPUT"),
    ("POST", "/druid/v2/sql", {"query": "SELEC 1"}, 400, "INVALID_INPUT"),
    ("DELETE", "/druid/v2/sql/no-such-query", None, 404, "NOT_FOUND"),
    ("GET", "/console/no-such-asset", None, 404, "NOT_FOUND"),
    ("GET", "/no/such/route", None, 404, "NOT_FOUND"),
    ("POST", "/druid/v2/sql", "x" * 2_000_000, 413, "CAPACITY_EXCEEDED"),
])
def test_every_error_has_druids_shape(api: Api, method, path, body, status, category):
    """Druid's clients read errorMessage (pydruid raises KeyError without it); tools also read category."""
    answer = api.http.request(method, path, json=body if isinstance(body, dict) else None,
                              content=body if isinstance(body, str) else None)
    assert answer.status_code == status
    shape = answer.json()
    assert DRUID_ERROR_KEYS <= set(shape) and shape["error"] == "druidException", shape
    assert shape["category"] == category and shape["errorMessage"] and isinstance(shape["context"], dict)


def test_a_running_query_is_cancelled_by_its_sql_query_id(api: Api):
    """Druid's DELETE /druid/v2/sql/{id}: 202, the query ends with a 400 QUERY_CANCELLED; unknown ids 404."""
    heavy = {"query": "SELECT count(*) FROM range(1000000) a CROSS JOIN range(1000000) b WHERE a.id * 7 + b.id = 3",
             "context": {"sqlQueryId": "cancel-me-1"}}
    answers: list[httpx.Response] = []
    asking = threading.Thread(target=lambda: answers.append(api.http.post("/druid/v2/sql", json=heavy)))
    asking.start()
    wait_until(lambda: api.http.delete("/druid/v2/sql/cancel-me-1").status_code == 202, "a cancellable query", 30)
    asking.join(60)
    [answer] = answers
    assert answer.status_code == 400 and answer.json()["context"]["errorClass"] == "QUERY_CANCELLED", answer.text
    assert api.http.delete("/druid/v2/sql/cancel-me-1").status_code == 404
    done = api.http.post("/druid/v2/sql", json={"query": "SELECT 1 AS one", "context": {"sqlQueryId": "named-2"}})
    assert done.headers["X-Druid-SQL-Query-Id"] == "named-2"
    assert len(api.http.post("/druid/v2/sql", json={"query": "SELECT 1"}).headers["X-Druid-SQL-Query-Id"]) == 32


def test_reset_offsets_of_a_topic_pattern_name_topic_and_partition(api: Api, make_topic, datasource):
    topic = make_topic(1)
    submit(api, spec_json(datasource, None, topicPattern=topic, useEarliestOffset=True))
    wait_until(lambda: api.get(f"/supervisor/{datasource}/status")["payload"]["latestOffsets"] != {},
               "the partitions to be seen", 15)
    api.post(f"/supervisor/{datasource}/suspend")
    produce_and_see(api, datasource, topic, f"{topic}:0")
    status = api.get(f"/supervisor/{datasource}/status")["payload"]
    assert status["stream"] == topic and list(status["latestOffsets"]) == [f"{topic}:0"]

    def reset(offsets: dict[str, int]) -> httpx.Response:
        return api.post(f"/supervisor/{datasource}/resetOffsets", json={
            "type": "kafka", "partitions": {"type": "end", "stream": topic, "partitionOffsetMap": offsets}})

    bare = reset({"0": 3})  # partition 0 of which topic?
    assert bare.status_code == 400 and bare.json()["errors"][0]["path"] == 'partitions.partitionOffsetMap["0"]'
    invalid = reset({"no such/topic:0": 3})
    assert invalid.status_code == 400 and "Kafka topic name" in invalid.json()["errorMessage"]
    assert reset({f"{topic}:0": 3}).json() == {"id": datasource}
    stored = committed_offsets(api.engine, datasource)
    assert stored is not None and stored.offsets.to_json() == {f"{topic}:0": 3}


def test_reset_offsets_keys_must_be_partitions_the_spec_reads_even_before_any_is_seen(api: Api, make_topic,
                                                                                       datasource):
    topic = make_topic(1)
    submit(api, spec_json(datasource, topic))
    pattern = f"{datasource}-.*"  # matches no topic: the supervisor knows no partition to check against
    submit(api, spec_json(f"{datasource}_p", None, topicPattern=pattern))
    for supervisor_id in (datasource, f"{datasource}_p"):
        api.post(f"/supervisor/{supervisor_id}/suspend")

    def reset(supervisor_id: str, stream: str, offsets: dict[str, int]) -> httpx.Response:
        return api.post(f"/supervisor/{supervisor_id}/resetOffsets", json={
            "type": "kafka", "partitions": {"type": "end", "stream": stream, "partitionOffsetMap": offsets}})

    named = reset(datasource, topic, {f"{topic}:0": 5})  # a topic's partitions are bare numbers
    assert named.status_code == 400 and named.json()["errors"][0]["path"].startswith("partitions.partitionOffsetMap")
    for key in ("0", "other-topic:0"):  # a pattern's partitions name a topic it matches
        refused = reset(f"{datasource}_p", pattern, {key: 5})
        assert refused.status_code == 400, refused.text
        assert refused.json()["errors"][0]["path"] == f'partitions.partitionOffsetMap["{key}"]'
    assert reset(f"{datasource}_p", pattern, {f"{datasource}-a:0": 5}).status_code == 200
    stored = committed_offsets(api.engine, f"{datasource}_p")
    assert stored is not None and stored.offsets.to_json() == {f"{datasource}-a:0": 5}


def test_reset_offsets_over_offsets_of_another_stream_is_refused_until_a_reset(api: Api, make_topic, datasource):
    pin_offsets(api.engine, datasource, "old-topic", {0: 3})  # the datasource read another topic before
    topic = make_topic(1)
    submit(api, spec_json(datasource, None, topicPattern=topic))
    api.post(f"/supervisor/{datasource}/suspend")
    refused = api.post(f"/supervisor/{datasource}/resetOffsets", json={"type": "kafka", "partitions": {
        "type": "end", "stream": topic, "partitionOffsetMap": {f"{topic}:0": 1}}})
    assert refused.status_code == 400 and "reset the supervisor" in refused.json()["errorMessage"]
    stored = committed_offsets(api.engine, datasource)
    assert stored is not None and (stored.topic, stored.offsets.to_json()) == ("old-topic", {"0": 3})


def test_compaction_api_refuses_a_stored_spec_redefining_a_metric_of_the_segments(
        api: Api, spark: Any, make_topic, datasource):
    """Segments of ``overlord index`` say how they were aggregated: a spec saying otherwise gets a 400."""
    topic = make_topic(1)
    spec = spec_json(datasource, topic)
    for value in (5, 7):
        event = {"ts": "2024-05-01T10:00:00Z", "country": "NL", "device": "d", "value": value, "price": 1.0}
        produce(api.overlord.settings.kafka_bootstrap_servers, topic, [json.dumps(event).encode()], 1)
        assert index_once(spark, api.engine, api.overlord.settings, load_supervisor_spec(spec)).outcome.ok
    wrong = json.loads(json.dumps(spec))
    [value_sum] = [m for m in wrong["spec"]["dataSchema"]["metricsSpec"] if m["name"] == "value_sum"]
    value_sum["type"] = "longMax"
    submitted = api.post("/supervisor", json=wrong)
    assert submitted.status_code == 400 and "expected longSum, found longMax" in submitted.text, submitted.text
    api.overlord.store.append_spec(datasource, wrong, terminated=True)  # stored by an earlier release, unchecked
    before = sorted((s.id, s.version) for s in visible_segments(api.engine, datasource))

    compacted = api.http.post(f"/druid/indexer/v1/compact/{datasource}", json={})
    assert compacted.status_code == 400, compacted.text
    assert "metric 'value_sum': expected longSum, found longMax" in compacted.text, compacted.text
    assert sorted((s.id, s.version) for s in visible_segments(api.engine, datasource)) == before
