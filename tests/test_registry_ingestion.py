"""Topics of Avro and Protobuf values in Confluent's wire format, through a supervisor: exact across a schema
change, a registry outage and an overlord SIGKILL, the registry's credentials never shown.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from overlord.dev.sample_data import produce
from specs.schema_registry import ALLOWED_REGISTRIES_VARIABLE
from tests.helpers import committed_total, published_table, spec_json, wait_until
from tests.schema_registry import Registry, running_registry

PASSWORD = "reg1stry-pass"
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"}, {"name": "amount", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "city", "type": ["null", "string"], "default": None}]}
BASE_MS = 1_704_103_200_000


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    with running_registry("reader", PASSWORD) as running:
        monkeypatch.setenv(ALLOWED_REGISTRIES_VARIABLE, running.url)
        yield running


def _orders(registry: Registry, topic: str, schema: dict[str, Any], rows: list[dict[str, Any]]) -> list[bytes]:
    client = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": f"reader:{PASSWORD}"})
    serialize = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return [value for row in rows if (value := serialize(row, context)) is not None]


def _protobuf_orders(registry: Registry, topic: str, rows: list[dict[str, Any]], city: bool) -> list[bytes]:
    """Each row as a shop.Order message (``city``: its second version, with a city field) as producers write it."""
    file = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    order = file.message_type.add(name="Order")
    fields = [("ts", 3), ("country", 9), ("amount", 3), *([("city", 9)] if city else [])]  # int64, string
    for number, (name, kind) in enumerate(fields, start=1):
        order.field.add(name=name, number=number, type=kind, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    client = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": f"reader:{PASSWORD}"})
    serialize = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE)
    return [value for row in rows if (value := serialize(order_class(**row), context)) is not None]


def _spec(datasource: str, topic: str, registry: Registry, kind: str = "avro") -> dict[str, Any]:
    decoder = {"type": "schema_registry", "url": registry.url,
               "config": {"basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": f"reader:{PASSWORD}"}}
    spec = spec_json(datasource, topic, inputFormat={"type": "avro_stream", "avroBytesDecoder": decoder}
                     if kind == "avro" else {"type": "protobuf", "protoBytesDecoder": decoder})
    spec["spec"]["dataSchema"].update({
        "timestampSpec": {"column": "ts", "format": "millis"},
        "dimensionsSpec": {"dimensions": ["country", "city"]},
        "metricsSpec": [{"type": "count", "name": "count"},
                        {"type": "longSum", "name": "amount", "fieldName": "amount"}],
        "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR", "rollup": True}})
    return spec


def _sums(engine: Any, datasource: str) -> Counter[tuple[str, str | None]]:
    sums: Counter[tuple[str, str | None]] = Counter()
    for row in published_table(engine, datasource).to_pylist():
        sums[(row["country"], row["city"])] += row["amount"]
    return sums


def test_a_registry_topic_is_exact_across_a_schema_change_and_an_outage(registry: Registry, stack, make_overlord,
                                                                        make_topic, datasource) -> None:
    topic = make_topic(2)
    first = [{"ts": BASE_MS + i, "country": "DE" if i % 3 else "FR", "amount": i} for i in range(60)]
    second = [{"ts": BASE_MS + i, "country": "DE", "amount": 100 + i, "city": "Bonn" if i % 2 else None}
              for i in range(40)]
    v1_values, v2_values = _orders(registry, topic, V1, first), _orders(registry, topic, V2, second)
    produce(stack.bootstrap_servers, topic, [*v1_values, b"\x00\x00\x00\x7f\xffnot avro"], 2)
    overlord = make_overlord()
    overlord.submit(_spec(datasource, topic, registry))
    wait_until(lambda: committed_total(overlord.engine, datasource) == 61, "the v1 records", 120)
    sup = overlord.get(datasource)
    assert sup.status.counters.unparseable == 1

    registry.outage = True  # the v2 schema is new to the tasks: they must ask, and fail
    produce(stack.bootstrap_servers, topic, v2_values, 2)
    wait_until(lambda: any(registry.url in e.message and "503" in e.message for e in sup.status.recent_errors),
               "the supervisor to name the registry", 120)
    assert committed_total(overlord.engine, datasource) == 61  # nothing published while it is down
    assert all(PASSWORD not in e.message for e in sup.status.recent_errors)

    registry.outage = False
    wait_until(lambda: committed_total(overlord.engine, datasource) == 101, "the v2 records", 120)
    expected: Counter[tuple[str, str | None]] = Counter()
    for row in [*first, *second]:
        expected[(row["country"], row.get("city"))] += row["amount"]
    assert _sums(overlord.engine, datasource) == expected


@pytest.mark.long
def test_a_protobuf_registry_topic_is_exact_across_a_schema_change(registry: Registry, stack, make_overlord,
                                                                  make_topic, datasource) -> None:
    """Druid's protobuf format through a registry: flat messages (read a batch at once), a second version of the
    message mid-stream, a malformed value counted.
    """
    topic = make_topic(2)
    first = [{"ts": BASE_MS + i, "country": "DE" if i % 3 else "FR", "amount": i} for i in range(60)]
    second = [{"ts": BASE_MS + i, "country": "DE", "amount": 100 + i, "city": "Bonn" if i % 2 else ""}
              for i in range(40)]
    values = [*_protobuf_orders(registry, topic, first, city=False), b"\x00\x00\x00\x00\x01\x00\xff\xff",
              *_protobuf_orders(registry, topic, second, city=True)]
    produce(stack.bootstrap_servers, topic, values, 2)
    overlord = make_overlord()
    overlord.submit(_spec(datasource, topic, registry, "protobuf"))
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(values), "every record", 120)
    assert overlord.get(datasource).status.counters.unparseable == 1
    expected: Counter[tuple[str, str | None]] = Counter()
    for row in [*first, *second]:
        expected[(row["country"], row.get("city") or None)] += row["amount"]  # proto3: "" is unset
    assert _sums(overlord.engine, datasource) == expected


@pytest.mark.long
def test_an_overlord_sigkilled_while_it_reads_a_registry_topic_restarts_exact(registry: Registry, stack, engine,
                                                                              make_topic, datasource, tmp_path):
    """Killed while its first task reads Avro values through the registry; the restarted overlord's tasks
    fetch the schema again and publish exactly what was produced.
    """
    import httpx

    from tests.helpers import OverlordProcess

    topic = make_topic(2)
    orders = [{"ts": BASE_MS + i, "country": ("DE", "FR", "IT")[i % 3], "amount": i % 97} for i in range(30_000)]
    produce(stack.bootstrap_servers, topic, _orders(registry, topic, V1, orders), 2)
    env = stack.as_env() | {"OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"), "OVERLORD_SPARK_MASTER": "local[2]",
                            ALLOWED_REGISTRIES_VARIABLE: registry.url}
    server = OverlordProcess(env, tmp_path / "overlord-0.log")
    try:
        answer = httpx.post(f"{server.url}/druid/indexer/v1/supervisor", json=_spec(datasource, topic, registry),
                            timeout=30)
        assert answer.status_code == 200, answer.text
        wait_until(lambda: registry.requests.total() > 0 and httpx.get(
            f"{server.url}/druid/indexer/v1/tasks?state=running", timeout=5).json() != [], "a task reading")
        server.kill()
        assert committed_total(engine, datasource) in (-1, 0)
        server = OverlordProcess(env, tmp_path / "overlord-1.log")
        wait_until(lambda: committed_total(engine, datasource) == len(orders), "every record published", 180)
    finally:
        server.kill()
    expected: Counter[tuple[str, str | None]] = Counter()
    for row in orders:
        expected[(row["country"], None)] += row["amount"]
    assert _sums(engine, datasource) == expected
