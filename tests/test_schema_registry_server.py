"""The in-process schema registry (tests/schema_registry.py) against confluent-kafka's own client and serdes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import Message

from tests.schema_registry import CONTENT_TYPE, Registry, running_registry

TOPIC = "orders"
CTX = SerializationContext(TOPIC, MessageField.VALUE)
AVRO_SCHEMA = json.dumps({
    "type": "record", "name": "Order", "namespace": "registry_test",
    "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"},
               {"name": "note", "type": ["null", "string"], "default": None}],
})
JSON_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {"id": {"type": "string"}, "amount": {"type": "integer"}}, "required": ["id", "amount"],
})


def _client(registry: Registry, **conf: Any) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url, "max.retries": 0, **conf})


@pytest.fixture
def registry() -> Iterator[Registry]:
    with running_registry() as running:
        yield running


def _order_class() -> type[Message]:
    """``registry_test.Order`` (order.proto), importing common.proto (Money) and google's Timestamp."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    common = descriptor_pb2.FileDescriptorProto(name="registry_test/common.proto", package="registry_test",
                                                syntax="proto3")
    money = common.message_type.add(name="Money")
    money.field.add(name="currency", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    money.field.add(name="units", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool.Add(common)
    order_file = descriptor_pb2.FileDescriptorProto(
        name="registry_test/order.proto", package="registry_test", syntax="proto3",
        dependency=["registry_test/common.proto", "google/protobuf/timestamp.proto"])
    order = order_file.message_type.add(name="Order")
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    order.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=optional)
    for name, number, type_name in (("total", 2, ".registry_test.Money"), ("at", 3, ".google.protobuf.Timestamp")):
        order.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                        type_name=type_name, label=optional)
    pool.Add(order_file)
    order_class: type[Message] = message_factory.GetMessageClass(pool.FindMessageTypeByName("registry_test.Order"))
    return order_class


def test_avro_round_trip_and_stable_ids(registry: Registry) -> None:
    record = {"id": "o-1", "amount": 42, "note": None}
    data = AvroSerializer(_client(registry), AVRO_SCHEMA)(record, CTX)
    assert data is not None and data[0] == 0
    schema_id = int.from_bytes(data[1:5], "big")
    deserialize = AvroDeserializer(_client(registry))
    assert deserialize(data, CTX) == record
    assert deserialize(data, CTX) == record
    assert registry.requests[f"/schemas/ids/{schema_id}"] == 1  # the client caches the writer schema

    again = _client(registry)
    assert again.register_schema(f"{TOPIC}-value", Schema(AVRO_SCHEMA, "AVRO")) == schema_id
    assert again.register_schema("elsewhere-value", Schema(AVRO_SCHEMA, "AVRO")) == schema_id
    evolved = json.loads(AVRO_SCHEMA)
    evolved["fields"].append({"name": "channel", "type": "string", "default": "web"})
    assert again.register_schema(f"{TOPIC}-value", Schema(json.dumps(evolved), "AVRO")) == schema_id + 1
    assert sorted(again.get_subjects()) == ["elsewhere-value", f"{TOPIC}-value"]
    assert again.get_versions(f"{TOPIC}-value") == [1, 2]
    latest = again.get_latest_version(f"{TOPIC}-value")
    assert latest.version == 2 and latest.schema.schema_type == "AVRO"
    assert {(v.subject, v.version) for v in again.get_schema_versions(schema_id)} == {
        (f"{TOPIC}-value", 1), ("elsewhere-value", 1)}
    found = again.lookup_schema(f"{TOPIC}-value", Schema(AVRO_SCHEMA, "AVRO"))
    assert (found.schema_id, found.version) == (schema_id, 1)

    raw = httpx.get(f"{registry.url}/schemas/ids/{schema_id}")
    assert raw.headers["content-type"] == CONTENT_TYPE
    assert raw.json() == {"schema": AVRO_SCHEMA, "references": []}


def test_protobuf_round_trip_with_references(registry: Registry) -> None:
    order_class = _order_class()
    order = order_class(id="o-7")
    order.total.currency, order.total.units = "EUR", 1250
    order.at.seconds = 1_700_000_000
    data = ProtobufSerializer(order_class, _client(registry))(order, CTX)
    assert data is not None

    client = _client(registry)
    assert sorted(client.get_subjects()) == [f"{TOPIC}-value", "registry_test/common.proto"]
    value = client.get_latest_version(f"{TOPIC}-value")
    assert value.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in value.schema.references or []] == [
        ("registry_test/common.proto", "registry_test/common.proto", 1)]  # Timestamp: a known type, no subject

    before = registry.requests.copy()
    deserialize = ProtobufDeserializer(order_class, {}, _client(registry))
    assert deserialize(data, CTX) == order
    assert deserialize(data, CTX) == order
    assert registry.requests - before == {  # what a consumer asks, once: its subject, the schema, its import
        f"/associations/resources/-/{TOPIC}": 1,
        f"/schemas/ids/{value.schema_id}": 1,
        "/subjects/registry_test/common.proto/versions/1": 1,
    }


def test_json_schema_round_trip(registry: Registry) -> None:
    record = {"id": "o-3", "amount": 7}
    data = JSONSerializer(JSON_SCHEMA, _client(registry))(record, CTX)
    assert data is not None
    decoded = JSONDeserializer(None, schema_registry_client=_client(registry))(data, CTX)
    assert decoded == record
    schema = _client(registry).get_schema(int.from_bytes(data[1:5], "big"))
    assert (schema.schema_type, schema.schema_str) == ("JSON", JSON_SCHEMA)


def test_basic_auth() -> None:
    with running_registry(username="reader", password="s3cret") as registry:
        for conf in ({}, {"basic.auth.user.info": "reader:wrong"}):
            with pytest.raises(SchemaRegistryError) as refused:
                _client(registry, **conf).get_subjects()
            assert refused.value.http_status_code == 401
        assert _client(registry, **{"basic.auth.user.info": "reader:s3cret"}).get_subjects() == []


def test_outage_toggle(registry: Registry) -> None:
    record = {"id": "o-9", "amount": 1, "note": "x"}
    data = AvroSerializer(_client(registry), AVRO_SCHEMA)(record, CTX)
    schema_path = f"/schemas/ids/{int.from_bytes(data[1:5], 'big')}" if data else ""
    registry.outage = True
    for attempt in (lambda: _client(registry).get_subjects(), lambda: AvroDeserializer(_client(registry))(data, CTX)):
        with pytest.raises(SchemaRegistryError) as down:
            attempt()
        assert down.value.http_status_code == 503
    registry.outage = False
    assert AvroDeserializer(_client(registry))(data, CTX) == record
    # refused at its first call (the topic's subject association), it had not asked for the schema yet
    assert registry.requests[f"/associations/resources/-/{TOPIC}"] == 3
    assert registry.requests[schema_path] == 1


def test_unknown_id_is_40403(registry: Registry) -> None:
    with pytest.raises(SchemaRegistryError) as missing:
        _client(registry).get_schema(999)
    assert (missing.value.http_status_code, missing.value.error_code) == (404, 40403)
    raw = httpx.get(f"{registry.url}/schemas/ids/999")
    assert raw.json() == {"error_code": 40403, "message": "Schema not found"}


def test_config_and_unknown_subject(registry: Registry) -> None:
    client = _client(registry)
    assert client.get_compatibility() == "BACKWARD"
    for call in (lambda: client.get_compatibility("nope"), lambda: client.get_versions("nope")):
        with pytest.raises(SchemaRegistryError) as missing:
            call()
        assert missing.value.http_status_code == 404
