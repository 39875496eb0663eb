"""A spec cannot weaken the exact range read (refused at submission, and forced in the reader anyway), nor
make the reader load code or files (off the allow-list); secrets may come from the environment instead of the
spec (tests/test_consumer_properties.py has the rest of the allow-list).
"""

from __future__ import annotations

from typing import Any

import pytest

from indexing_task.reader import consumer_config
from specs import SpecError, load_supervisor_spec
from specs.spec_errors import join_path, key_path
from tests.helpers import spec_json

WEAKENING = {
    "auto.offset.reset": "latest",  # would skip a range lost to retention instead of failing
    "isolation.level": "read_uncommitted",  # would index aborted transactions
    "enable.partition.eof": False,  # a range ending on a transaction marker would never finish
    "enable.auto.commit": True,
    "enable.auto.offset.store": True,
}


@pytest.mark.parametrize(("key", "value"), list(WEAKENING.items()))
def test_a_spec_that_weakens_the_exact_read_is_refused_naming_the_property(key: str, value: Any) -> None:
    raw = spec_json("ds", "topic", consumerProperties={"bootstrap.servers": "b:9092", key: value})
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    (path, message), = refused.value.errors
    assert path == f'spec.ioConfig.consumerProperties["{key}"]'
    assert "exact" in message and str(value).lower() in message.lower()


def test_the_same_values_as_the_reader_uses_are_accepted() -> None:
    spec = load_supervisor_spec(spec_json("ds", "topic", consumerProperties={
        "isolation.level": "read_committed", "enable.partition.eof": "true", "auto.offset.reset": "error"}))
    assert spec.spec.io_config.consumer_properties["isolation.level"] == "read_committed"


def test_the_reader_applies_its_exact_read_settings_after_the_spec_properties() -> None:
    config = consumer_config({"bootstrap.servers": "b:9092", "fetch.wait.max.ms": 10, **WEAKENING}, "g")
    assert config["auto.offset.reset"] == "error" and config["isolation.level"] == "read_committed"
    assert config["enable.partition.eof"] is True and config["enable.auto.commit"] is False
    assert config["enable.auto.offset.store"] is False
    assert config["fetch.wait.max.ms"] == 10 and config["bootstrap.servers"] == "b:9092"  # tuning stays the user's


@pytest.mark.parametrize(("key", "value"), [
    ("plugin.library.paths", "/tmp/evil.so"),
    ("ssl.engine.location", "/tmp/engine.so"),
    ("ssl.providers", "legacy"),
    ("sasl.kerberos.kinit.cmd", "touch /tmp/pwned"),
    ("sasl.kerberos.keytab", "/etc/krb5.keytab"),
    ("ssl.key.location", "/etc/shadow"),
    ("ssl.ca.location", "/etc/passwd"),
    ("https.ca.location", "/etc/passwd"),
    ("interceptor.classes", "com.example.Evil"),
    ("error_cb", "print"),
])
def test_properties_that_load_code_or_files_are_refused_naming_them(key: str, value: Any) -> None:
    raw = spec_json("ds", "topic", consumerProperties={"bootstrap.servers": "b:9092", key: value})
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    (path, message), = refused.value.errors
    assert path == join_path("spec.ioConfig.consumerProperties", key_path(key)) and "not on the allow-list" in message


def test_secrets_come_from_the_environment_through_druids_dynamic_config_provider(monkeypatch) -> None:
    from indexing_task.reader import resolved_consumer_properties

    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "b:9092")  # the only brokers the overlord's secrets go to
    provider = {"type": "environment", "variables": {"sasl.password": "OVERLORD_SECRET_KAFKA_PASSWORD"}}
    spec = load_supervisor_spec(spec_json("ds", "topic", consumerProperties={
        "bootstrap.servers": "b:9092", "sasl.username": "indexer", "druid.dynamic.config.provider": provider}))
    monkeypatch.setenv("OVERLORD_SECRET_KAFKA_PASSWORD", "s3cret")
    assert resolved_consumer_properties(spec.spec.io_config.consumer_properties) == {
        "bootstrap.servers": "b:9092", "sasl.username": "indexer", "sasl.password": "s3cret"}
    assert "s3cret" not in str(spec.to_druid_json())  # the spec holds the variable's name, not its value
    monkeypatch.delenv("OVERLORD_SECRET_KAFKA_PASSWORD")
    with pytest.raises(SpecError, match="OVERLORD_SECRET_KAFKA_PASSWORD is not set"):
        resolved_consumer_properties(spec.spec.io_config.consumer_properties)


@pytest.mark.parametrize(("provider", "fragment"), [
    ({"type": "environment", "variables": {"sasl.password": "AWS_SECRET_ACCESS_KEY"}}, "OVERLORD_SECRET_"),
    ({"type": "environment", "variables": {"client.id": "OVERLORD_SECRET_X"}}, "only secrets"),
    ({"type": "file", "variables": {"sasl.password": "OVERLORD_SECRET_X"}}, "environment"),
    ({"type": "environment", "variables": {"plugin.library.paths": "OVERLORD_SECRET_X"}}, "only secrets"),
    ({"type": "environment", "variables": {"isolation.level": "OVERLORD_SECRET_X"}}, "only secrets"),
    ("KAFKA_PASSWORD", "object"),
])
def test_a_provider_can_read_only_the_overlords_secret_variables(provider: Any, fragment: str, monkeypatch) -> None:
    monkeypatch.setenv("OVERLORD_ALLOWED_BOOTSTRAP", "b:9092")
    raw = spec_json("ds", "topic", consumerProperties={"bootstrap.servers": "b:9092",
                                                       "druid.dynamic.config.provider": provider})
    with pytest.raises(SpecError) as refused:
        load_supervisor_spec(raw)
    [(path, message)] = refused.value.errors
    assert path.startswith('spec.ioConfig.consumerProperties["druid.dynamic.config.provider"]')
    assert fragment in message, message
