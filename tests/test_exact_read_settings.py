"""A spec cannot weaken the exact range read: refused at submission, and forced in the reader anyway."""

from __future__ import annotations

from typing import Any

import pytest

from indexing_task.reader import consumer_config
from specs import SpecError, load_supervisor_spec
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
