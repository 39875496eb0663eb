"""Avro, Protobuf and JSON values in Confluent's wire format, written by confluent-kafka's own serializers
against a schema registry (tests/schema_registry.py), read by the parse as Druid reads them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import Message

from indexing_task.registry_schemas import MAX_ANSWER_BYTES, RegistrySchemas
from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from indexing_task.task_errors import SchemaRegistryUnavailable
from specs import SpecError, load_supervisor_spec
from specs.masked import mask_secrets
from specs.schema_registry import ALLOWED_REGISTRIES_VARIABLE
from tests.schema_registry import Registry, running_registry

pytestmark = pytest.mark.unit
TOPIC = "orders"
CTX = SerializationContext(TOPIC, MessageField.VALUE)
HOUR = 1_704_103_200_000  # 2024-01-01T10:00Z
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    with running_registry("reader", "s3cret-pass") as running:
        monkeypatch.setenv(ALLOWED_REGISTRIES_VARIABLE, running.url)
        yield running


def _client(registry: Registry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": "reader:s3cret-pass"})


def _schema(input_format: dict[str, Any], dimensions: list[str], metric_field: str, *, ts: str = "ts",
            ts_format: str = "millis", flatten: list[dict[str, str]] | None = None) -> RollupSchema:
    if flatten:
        input_format = {**input_format, "flattenSpec": {"fields": flatten}}
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "orders", "timestampSpec": {"column": ts, "format": ts_format},
                       "dimensionsSpec": {"dimensions": dimensions},
                       "metricsSpec": [{"type": "count", "name": "cnt"},
                                       {"type": "longSum", "name": "total", "fieldName": metric_field}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "HOUR"}},
        "ioConfig": {"topic": TOPIC, "inputFormat": input_format}}})
    return RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format)


def _registry_decoder(registry: Registry) -> dict[str, Any]:
    return {"type": "schema_registry", "url": registry.url,
            "config": {"basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "reader:s3cret-pass"},
            "headers": {"traceID": "b29c5de2"}}


def _rows(rollup: Rollup, values: list[bytes | None]) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
    parsed = rollup.parse(values)
    rows = sorted((tuple(v for k, v in row.items() if not k.startswith("__"))
                   for row in rollup.merge([parsed.rows]).to_pylist()), key=repr)
    return rows, {bad.index: bad.reason for bad in parsed.bad_samples}


AVRO_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"}, {"name": "amount", "type": "long"}]}
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"], {"name": "city", "type": ["null", "string"], "default": None}]}


def test_avro_through_a_registry_is_read_across_a_schema_change(registry: Registry) -> None:
    """Producers move from v1 to v2 mid-stream; each value is read with its own writer schema (fetched once)."""
    v1 = AvroSerializer(_client(registry), json.dumps(AVRO_V1))
    v2 = AvroSerializer(_client(registry), json.dumps(AVRO_V2))
    values = [v1({"ts": HOUR, "country": "DE", "amount": 2}, CTX), v1({"ts": HOUR, "country": "DE", "amount": 3}, CTX),
              v2({"ts": HOUR, "country": "DE", "amount": 4, "city": "Bonn"}, CTX),
              v2({"ts": HOUR, "country": "FR", "amount": 5, "city": None}, CTX),
              b"\x00\x00\x00\x03\xe7" + b"\x02", b"{not framed}", b"\x00\x00\x00", None]
    ids = {int.from_bytes(v[1:5], "big") for v in values[:4] if v is not None}
    rollup = Rollup(_schema({"type": "avro_stream", "avroBytesDecoder": _registry_decoder(registry)},
                            ["country", "city"], "amount"))
    rows, bad = _rows(rollup, values)
    assert rows == [("DE", "Bonn", 1, 4), ("DE", None, 2, 5), ("FR", None, 1, 5)]
    assert bad == {4: "schema id 999 is not in the registry",
                   5: "not in Confluent's wire format (magic byte, schema id, message indexes)",
                   6: "not in Confluent's wire format (magic byte, schema id, message indexes)", 7: "null value"}
    assert {registry.requests[f"/schemas/ids/{i}"] for i in ids} == {1}  # each writer schema fetched once
    rollup.parse(values[:4])
    assert {registry.requests[f"/schemas/ids/{i}"] for i in ids} == {1}


def test_a_registry_that_cannot_answer_fails_the_batch_naming_it(registry: Registry) -> None:
    value = AvroSerializer(_client(registry), json.dumps(AVRO_V1))({"ts": HOUR, "country": "DE", "amount": 1}, CTX)
    decoder = {**_registry_decoder(registry), "url": registry.url + "/"}  # another decoder: nothing cached
    rollup = Rollup(_schema({"type": "avro_stream", "avroBytesDecoder": decoder}, ["country"], "amount"))
    registry.outage = True
    with pytest.raises(SchemaRegistryUnavailable, match=f"schema registry {registry.url}/ answered 503") as failed:
        rollup.parse([value])
    assert "s3cret" not in str(failed.value)
    registry.outage = False
    assert _rows(rollup, [value]) == ([("DE", 1, 1)], {})


def test_wrong_registry_credentials_fail_the_batch(registry: Registry) -> None:
    value = AvroSerializer(_client(registry), json.dumps(AVRO_V1))({"ts": HOUR, "country": "DE", "amount": 1}, CTX)
    decoder = {**_registry_decoder(registry), "config": {"basic.auth.user.info": "reader:wrong"}}
    rollup = Rollup(_schema({"type": "avro_stream", "avroBytesDecoder": decoder}, ["country"], "amount"))
    with pytest.raises(SchemaRegistryUnavailable, match="answered 401"):
        rollup.parse([value])


def test_registry_credentials_can_come_from_the_overlords_environment(registry: Registry,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Druid's environment provider, as for Kafka passwords: the spec names a variable, never the secret."""
    value = AvroSerializer(_client(registry), json.dumps(AVRO_V1))({"ts": HOUR, "country": "DE", "amount": 6}, CTX)
    decoder = {"type": "schema_registry", "url": registry.url, "config": {"druid.dynamic.config.provider": {
        "type": "environment", "variables": {"basic.auth.user.info": "OVERLORD_SECRET_REGISTRY"}}}}
    monkeypatch.setenv("OVERLORD_SECRET_REGISTRY", "reader:s3cret-pass")
    assert _rows(Rollup(_schema({"type": "avro_stream", "avroBytesDecoder": decoder}, ["country"], "amount")),
                 [value]) == ([("DE", 1, 6)], {})
    monkeypatch.delenv("OVERLORD_SECRET_REGISTRY")
    with pytest.raises(SpecError, match="environment variable OVERLORD_SECRET_REGISTRY is not set"):
        _schema({"type": "avro_stream", "avroBytesDecoder": decoder}, ["country"], "amount")


def _order_files() -> list[descriptor_pb2.FileDescriptorProto]:
    """common.proto (Money) and order.proto: a Header message first, then Order (importing Money and Timestamp)."""
    common = descriptor_pb2.FileDescriptorProto(name="shop/common.proto", package="shop", syntax="proto3")
    money = common.message_type.add(name="Money")
    money.field.add(name="currency", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=_OPTIONAL)
    money.field.add(name="units", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=_OPTIONAL)
    order_file = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto", package="shop", syntax="proto3",
        dependency=["shop/common.proto", "google/protobuf/timestamp.proto"])
    header = order_file.message_type.add(name="Header")
    header.field.add(name="source", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=_OPTIONAL)
    order = order_file.message_type.add(name="Order")
    order.field.add(name="order_id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=_OPTIONAL)
    order.field.add(name="channel", number=4, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=_OPTIONAL)
    for name, number, type_name in (("total", 2, ".shop.Money"), ("at", 3, ".google.protobuf.Timestamp")):
        order.field.add(name=name, number=number, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                        type_name=type_name, label=_OPTIONAL)
    return [common, order_file]


def _order_class() -> type[Message]:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    for file in _order_files():
        pool.Add(file)
    order_class: type[Message] = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    return order_class


def _order(order_class: type[Message], order_id: str, currency: str, units: int, channel: str = "") -> Message:
    order = order_class(order_id=order_id, channel=channel)
    order.total.currency, order.total.units = currency, units
    order.at.seconds = HOUR // 1000 + 61
    return order


_PROTOBUF_FIELDS = [{"type": "path", "name": "currency", "expr": "$.total.currency"},
                    {"type": "path", "name": "units", "expr": "$.total.units"}]


def test_protobuf_through_a_registry_reads_imported_and_second_messages(registry: Registry) -> None:
    """Order is the file's second message (message indexes [1]) and imports Money and Timestamp; the snake_case
    field ``order_id`` is read under its JSON name ``orderId`` as Druid does, and under its own where asked.
    """
    order_class = _order_class()
    serialize = ProtobufSerializer(order_class, _client(registry), {"use.deprecated.format": False})
    values = [serialize(_order(order_class, "o-1", "EUR", 1250, "web"), CTX),
              serialize(_order(order_class, "o-1", "EUR", 50), CTX),
              serialize(_order(order_class, "o-2", "USD", 7), CTX)]
    assert values[0] is not None and values[0][5] == 2  # one index, zigzag: [1]
    values[2] = values[2][:-3] if values[2] is not None else None  # a truncated message
    rollup = Rollup(_schema({"type": "protobuf", "protoBytesDecoder": _registry_decoder(registry)},
                            ["order_id", "orderId", "currency", "channel"], "units", ts="at", ts_format="iso",
                            flatten=_PROTOBUF_FIELDS))
    rows, bad = _rows(rollup, values)
    assert rows == [("o-1", "o-1", "EUR", "web", 1, 1250), ("o-1", "o-1", "EUR", None, 1, 50)]
    assert list(bad) == [2] and bad[2].startswith("not a value of schema id")


def test_protobuf_with_an_inline_descriptor_set_reads_plain_messages() -> None:
    order_class = _order_class()
    descriptor_set = descriptor_pb2.FileDescriptorSet(file=_order_files())  # Timestamp: known without it
    decoder = {"type": "inline", "protoMessageType": "Order",
               "descriptorString": base64.b64encode(descriptor_set.SerializeToString()).decode()}
    rollup = Rollup(_schema({"type": "protobuf", "protoBytesDecoder": decoder}, ["orderId", "currency"], "units",
                            ts="at", ts_format="iso", flatten=_PROTOBUF_FIELDS))
    values = [_order(order_class, "o-1", "EUR", 3).SerializeToString(),
              _order(order_class, "o-1", "EUR", 4).SerializeToString(), b"\xff\xff"]
    rows, bad = _rows(rollup, values)
    assert rows == [("o-1", "EUR", 2, 7)]
    assert bad == {2: "not a Protobuf message of the spec's type (DecodeError)"}


def test_json_in_confluents_wire_format_is_read_as_the_document(registry: Registry) -> None:
    """Beyond Druid, whose json format fails on the magic byte: the 5-byte prefix is skipped."""
    schema = json.dumps({"type": "object", "properties": {"ts": {"type": "integer"}, "country": {"type": "string"},
                                                          "amount": {"type": "integer"}}})
    serialize = JSONSerializer(schema, _client(registry))
    values = [serialize({"ts": HOUR, "country": "DE", "amount": 2}, CTX), b'{"ts": %d, "country": "DE", "amount": 3}'
              % HOUR, serialize({"ts": HOUR, "country": "FR", "amount": 4}, CTX)]
    assert values[0] is not None and values[0][0] == 0
    values += [b"\x00", b"\x00ab"]  # shorter than the prefix (Arrow's binary_slice failed the batch on them)
    rows, bad = _rows(Rollup(_schema({"type": "json"}, ["country"], "amount")), values)
    assert rows == [("DE", 2, 5), ("FR", 1, 4)] and sorted(bad) == [3, 4]


def test_decoders_refused_or_off_get_a_400_naming_the_field(registry: Registry, tmp_path: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def error(input_format: dict[str, Any]) -> str:
        with pytest.raises(SpecError) as refused:
            _schema(input_format, ["country"], "amount")
        return str(refused.value)

    assert "spec.ioConfig.inputFormat.avroBytesDecoder.type: 'schema_repo' is Druid's AVRO-1124" in error(
        {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_repo"}})
    assert "avroBytesDecoder.url: http://10.0.0.1:8081 is not an allowed schema registry" in error(
        {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "url": "http://10.0.0.1:8081"}})
    monkeypatch.setenv(ALLOWED_REGISTRIES_VARIABLE, f"{registry.url}/")  # every URL under it
    for url in ("file:///etc/passwd", f"{registry.url}/x,http://169.254.169.254", f"{registry.url}/%2e%2e/x"):
        assert "avroBytesDecoder.urls[0]: expected an http:// or https:// URL" in error(  # the client splits on ","
            {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_registry", "urls": [url]}})
    for headers in ({"Host": "admin.internal"}, {"druid.dynamic.config.provider": {"type": "mapString", "config": {
            "Transfer-Encoding": "chunked"}}}):
        assert "a header that routes the request" in error(
            {"type": "avro_stream", "avroBytesDecoder": {**_registry_decoder(registry), "headers": headers}})
    assert "avroBytesDecoder.schema: not a valid Avro schema: the type 'N' contains itself" in error(
        {"type": "avro_stream", "avroBytesDecoder": {"type": "schema_inline", "schema": RECURSIVE}})
    assert "TLS files on the server are not read" in error({"type": "protobuf", "protoBytesDecoder": {
        **_registry_decoder(registry), "config": {"schema.registry.ssl.truststore.location": "/etc/ssl/x.jks"}}})
    outside = tmp_path / "outside.desc"
    outside.write_bytes(descriptor_pb2.FileDescriptorSet(file=_order_files()).SerializeToString())
    assert "protoBytesDecoder.descriptor: descriptor files are off" in error(
        {"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": f"file://{outside}"}})
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv("OVERLORD_PROTOBUF_DESCRIPTOR_DIRS", str(allowed))
    for path in (f"file://{outside}", "../outside.desc", "/etc/passwd"):
        assert "protoBytesDecoder.descriptor: no such file" in error(
            {"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": path}})
    (allowed / "order.desc").write_bytes(outside.read_bytes())
    assert "protoBytesDecoder.protoMessageType: no top-level message 'Nope'" in error(
        {"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": "order.desc",
                                                   "protoMessageType": "Nope"}})
    assert _schema({"type": "protobuf", "protoBytesDecoder": {"type": "file", "descriptor": "order.desc",
                                                              "protoMessageType": "shop.Order"}},
                   ["country"], "amount").decoder is not None


def test_registry_credentials_are_masked_like_kafka_passwords(registry: Registry) -> None:
    masked = mask_secrets({"inputFormat": {"avroBytesDecoder": _registry_decoder(registry)}})
    assert masked["inputFormat"]["avroBytesDecoder"]["config"]["basic.auth.user.info"] == "<masked>"
    assert masked["inputFormat"]["avroBytesDecoder"]["headers"] == {"traceID": "<masked>"}  # any header may be one


def _metrics_files() -> descriptor_pb2.FileDescriptorProto:
    """Druid's documented metrics.proto, compiled."""
    file = descriptor_pb2.FileDescriptorProto(name="metrics.proto", syntax="proto3")
    message = file.message_type.add(name="Metrics")
    for number, name in enumerate(["unit", "http_method", "value", "timestamp", "http_code", "page", "metricType",
                                   "server"], start=1):
        kind = descriptor_pb2.FieldDescriptorProto.TYPE_INT32 if name == "value" else \
            descriptor_pb2.FieldDescriptorProto.TYPE_STRING
        message.field.add(name=name, number=number, type=kind, label=_OPTIONAL)
    return file


def test_druids_documented_protobuf_spec_reads_its_metrics_example(tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor spec of Druid's Protobuf extension page, the descriptor's path substituted, unchanged."""
    (tmp_path / "metrics.desc").write_bytes(descriptor_pb2.FileDescriptorSet(file=[_metrics_files()])
                                            .SerializeToString())
    monkeypatch.setenv("OVERLORD_PROTOBUF_DESCRIPTOR_DIRS", str(tmp_path))
    spec = load_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {
            "dataSource": "metrics-protobuf", "timestampSpec": {"column": "timestamp", "format": "auto"},
            "dimensionsSpec": {"dimensions": ["unit", "http_method", "http_code", "page", "metricType", "server"],
                               "dimensionExclusions": ["timestamp", "value"]},
            "metricsSpec": [{"name": "count", "type": "count"},
                            {"name": "value_sum", "fieldName": "value", "type": "doubleSum"},
                            {"name": "value_min", "fieldName": "value", "type": "doubleMin"},
                            {"name": "value_max", "fieldName": "value", "type": "doubleMax"}],
            "granularitySpec": {"type": "uniform", "segmentGranularity": "HOUR", "queryGranularity": "NONE"}},
        "tuningConfig": {"type": "kafka", "maxRowsPerSegment": 5000000},
        "ioConfig": {"topic": "metrics_pb", "consumerProperties": {"bootstrap.servers": "localhost:9092"},
                     "inputFormat": {"type": "protobuf", "protoBytesDecoder": {
                         "type": "file", "descriptor": f"file://{tmp_path}/metrics.desc",
                         "protoMessageType": "Metrics"},
                         "flattenSpec": {"useFieldDiscovery": True}, "binaryAsString": False},
                     "taskCount": 1, "replicas": 1, "taskDuration": "PT1H", "type": "kafka"}}})
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_metrics_files())
    metrics = message_factory.GetMessageClass(pool.FindMessageTypeByName("Metrics"))
    events = [{"unit": "milliseconds", "http_method": "GET", "value": v, "timestamp": f"2017-04-06T02:36:{s:02d}Z",
               "http_code": "200", "page": "/", "metricType": "request/latency", "server": "www1.example.com"}
              for s, v in ((22, 44), (23, 10), (24, 0))]  # value 0: a proto3 default, absent, as Druid reads it
    parsed = rollup.parse([metrics(**event).SerializeToString() for event in events])
    assert parsed.bad_count == 0
    rows = [{k: v for k, v in row.items() if not k.startswith("__")} for row in parsed.rows.to_pylist()]
    assert sorted(((r["http_method"], r["metricType"], r["value_sum"]) for r in rows), key=repr) == [
        ("GET", "request/latency", 10.0), ("GET", "request/latency", 44.0),
        ("GET", "request/latency", None)]  # Druid's null sum of an absent field


def test_druids_documented_registry_headers_reach_the_registry_and_inline_secrets_stay_masked(
        registry: Registry) -> None:
    """The headers of Druid's data-formats example, a ``mapString`` provider among them, are sent with every request;
    a credential given through ``mapString`` is masked like one given directly.
    """
    value = AvroSerializer(_client(registry), json.dumps(AVRO_V1))({"ts": HOUR, "country": "DE", "amount": 2}, CTX)
    decoder = {"type": "schema_registry", "urls": [registry.url], "capacity": 100,
               "config": {"druid.dynamic.config.provider": {"type": "mapString", "config": {
                   "basic.auth.user.info": "reader:s3cret-pass"}}},
               "headers": {"traceID": "b29c5de2-0db4-490b-b421", "timeStamp": "1577191871865",
                           "druid.dynamic.config.provider": {"type": "mapString", "config": {
                               "registry.header.prop.1": "value.1", "registry.header.prop.2": "value.2"}}}}
    rollup = Rollup(_schema({"type": "avro_stream", "avroBytesDecoder": decoder}, ["country"], "amount"))
    assert _rows(rollup, [value]) == ([("DE", 1, 2)], {})
    sent = {k.lower(): v for k, v in registry.last_headers.items()}
    assert (sent["traceid"], sent["registry.header.prop.2"]) == ("b29c5de2-0db4-490b-b421", "value.2")
    masked = json.dumps(mask_secrets({"avroBytesDecoder": decoder}))
    assert "s3cret-pass" not in masked and "value.1" not in masked and "registry.header.prop.1" in masked


RECURSIVE = {"type": "record", "name": "N", "fields": [{"name": "ts", "type": "long"},
                                                       {"name": "next", "type": ["null", "N"]}]}


def test_hostile_registry_values_fail_only_themselves(registry: Registry) -> None:
    """A recursive writer schema (fastavro would crash the process on a value nested 200,000 deep), a negative or
    endless message index: each is one unparseable record, and the next record still reads.
    """
    client = _client(registry)
    good = AvroSerializer(client, json.dumps(AVRO_V1))({"ts": HOUR, "country": "DE", "amount": 1}, CTX)
    recursive_id = client.register_schema("nested-value", Schema(json.dumps(RECURSIVE), "AVRO"))
    deep = b"\x00" + recursive_id.to_bytes(4, "big") + b"\x02" + b"\x02" * 200_000 + b"\x00"
    rollup = Rollup(_schema({"type": "avro_stream", "avroBytesDecoder": _registry_decoder(registry)},
                            ["country"], "amount"))
    rows, bad = _rows(rollup, [deep, good])
    assert rows == [("DE", 1, 1)] and bad[0].startswith(f"schema id {recursive_id} cannot be used: the type 'N'")

    order_class = _order_class()
    serialize = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})
    framed = serialize(_order(order_class, "o-1", "EUR", 5), CTX)
    assert framed is not None
    negative = framed[:5] + b"\x02\x01" + framed[7:]  # one index, zigzag -1: would be the file's last message
    endless = framed[:5] + b"\xff" * 400_000
    rollup = Rollup(_schema({"type": "protobuf", "protoBytesDecoder": _registry_decoder(registry)},
                            ["orderId"], "units", ts="at", ts_format="iso", flatten=_PROTOBUF_FIELDS))
    rows, bad = _rows(rollup, [negative, endless, framed])
    assert rows == [("o-1", 1, 5)]
    assert set(bad.values()) == {"not in Confluent's wire format (magic byte, schema id, message indexes)"}


def test_a_reference_the_registry_cannot_send_fails_the_batch_not_the_record(registry: Registry) -> None:
    """The registry drops the connection on the import's subject only: the task must fail (nothing published),
    not mark the record unparseable and commit past it.
    """
    order_class = _order_class()
    framed = ProtobufSerializer(order_class, _client(registry), {"use.deprecated.format": False})(
        _order(order_class, "o-1", "EUR", 5), CTX)
    registry.dropped.add("/subjects/shop/common.proto/versions/1")
    decoder = {**_registry_decoder(registry), "capacity": 7}  # a decoder of its own: nothing cached
    rollup = Rollup(_schema({"type": "protobuf", "protoBytesDecoder": decoder}, ["orderId"], "units", ts="at",
                            ts_format="iso", flatten=_PROTOBUF_FIELDS))
    with pytest.raises(SchemaRegistryUnavailable, match="is unreachable"):
        rollup.parse([framed])


def test_a_spec_sent_back_with_its_masks_keeps_the_registry_secrets(registry: Registry) -> None:
    """The console's edit flow: GET (masked), change, POST; every masked registry secret keeps its stored value."""
    from specs.masked import keep_masked_secrets

    stored = {"type": "kafka", "spec": {"ioConfig": {"inputFormat": {"type": "avro_stream", "avroBytesDecoder": {
        **_registry_decoder(registry), "headers": {"Authorization": "Bearer t0ken", "traceID": "b29c5de2"}}}}}}
    edited = mask_secrets(stored)
    assert "t0ken" not in json.dumps(edited) and "s3cret-pass" not in json.dumps(edited)
    assert keep_masked_secrets(edited, stored) == stored
    with pytest.raises(SpecError, match=r"avroBytesDecoder\.headers\.Authorization: is <masked>"):
        keep_masked_secrets(edited, None)


@pytest.mark.parametrize("framing", ["unframed", "gzip"])
def test_a_registry_answer_past_the_bound_fails_the_task_whatever_its_framing(registry: Registry, framing: str) -> None:
    """No Content-Length (read until the connection closes), or a small gzip body that inflates: the bound is
    on the bytes read, not on what the header says.
    """
    schema_id = _client(registry).register_schema("orders-value", Schema(json.dumps(AVRO_V1), "AVRO"))
    registry.oversized = (framing, MAX_ANSWER_BYTES + 1)
    decoder = {**_registry_decoder(registry), "urls": [registry.url], "capacity": 10,
               "userInfo": "reader:s3cret-pass", "headers": {}}
    with pytest.raises(SchemaRegistryUnavailable, match="larger than"):
        RegistrySchemas(decoder).schema(schema_id, "AVRO")
    registry.oversized = None
    assert json.loads(RegistrySchemas(decoder).schema(schema_id, "AVRO").schema_str)["name"] == "Order"
