"""Offsets and offset ranges: validation, the one JSON encoding, and use across process boundaries."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel

from segment_store import OffsetRange, Offsets, TopicPartitionId, kafka_partition


def test_offsets_are_sorted_frozen_and_compare_as_mappings() -> None:
    offsets = Offsets({2: 5, 0: 7})
    assert list(offsets.items()) == [(0, 7), (2, 5)]
    assert offsets == {0: 7, 2: 5} and offsets == Offsets({"0": 7, "2": 5})
    assert hash(offsets) == hash(Offsets({0: 7, 2: 5}))
    with pytest.raises(TypeError):
        offsets[0] = 1  # type: ignore[index]


def test_the_json_encoding_round_trips() -> None:
    offsets = Offsets({10: 3, 2: 0})
    assert offsets.to_json() == {"2": 0, "10": 3}
    assert Offsets.from_json(offsets.to_json()) == offsets
    assert Offsets.from_json(None) == Offsets() == {}


@pytest.mark.parametrize(("raw", "message"), [
    ({0: -1}, "offset of partition 0: expected a non-negative integer, found -1"),
    ({-2: 0}, "partition: expected a non-negative integer, found -2"),
    ({0: "x"}, "found 'x'"),
    ({0: True}, "found True"),
    ({0: 1.5}, "found 1.5"),
])
def test_invalid_offsets_name_the_partition(raw: dict[object, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Offsets(raw)


def test_merged_and_only() -> None:
    offsets = Offsets({0: 1, 1: 2})
    assert offsets.merged({1: 5, 2: 0}) == {0: 1, 1: 5, 2: 0}
    assert offsets.only([1, 3]) == {1: 2}


def test_offsets_cross_pydantic_models_and_pickle() -> None:
    class Payload(BaseModel):
        start: Offsets

    payload = Payload.model_validate_json('{"start": {"1": 4, "0": 2}}')
    assert isinstance(payload.start, Offsets) and payload.start == {0: 2, 1: 4}
    assert payload.model_dump(mode="json") == {"start": {"0": 2, "1": 4}}
    assert pickle.loads(pickle.dumps(payload.start)) == payload.start


def test_ranges_need_the_same_partitions_and_no_backwards_partition() -> None:
    with pytest.raises(ValueError, match="same partitions"):
        OffsetRange(Offsets({0: 0, 1: 0}), Offsets({0: 5}))
    with pytest.raises(ValueError, match="partition 0: expected end >= start 5, found 4"):
        OffsetRange(Offsets({0: 5}), Offsets({0: 4}))
    offset_range = OffsetRange(Offsets({0: 5, 1: 3}), Offsets({0: 9, 1: 3}))
    assert offset_range.size() == 4 and not offset_range.empty and offset_range.partitions == [0, 1]
    assert str(offset_range) == "p0: [5, 9), p1: [3, 3)"


def test_partitions_of_several_topics_are_named_by_topic_in_druids_form() -> None:
    clicks0, views0 = TopicPartitionId("clicks", 0), TopicPartitionId("views", 0)
    offsets = Offsets({"views:0": 4, "clicks:0": 7, "clicks:10": 1})
    assert list(offsets) == [clicks0, TopicPartitionId("clicks", 10), views0]
    assert offsets[views0] == 4 and offsets.get(TopicPartitionId("views", 1)) is None
    assert offsets.to_json() == {"clicks:0": 7, "clicks:10": 1, "views:0": 4}
    assert Offsets.from_json(offsets.to_json()) == offsets and pickle.loads(pickle.dumps(offsets)) == offsets
    assert kafka_partition(views0, None) == ("views", 0) and kafka_partition(3, "events") == ("events", 3)
    assert str(OffsetRange(Offsets({clicks0: 1}), Offsets({clicks0: 5}))) == "clicks:0: [1, 5)"


@pytest.mark.parametrize(("raw", "message"), [
    ({"0": 1, "clicks:0": 1}, "expected partitions of one topic or all named by topic"),
    ({"clicks:-1": 1}, "partition 'clicks:-1': expected a non-negative integer"),
    ({":0": 1}, "expected \"topic:partition\" with a Kafka topic name"),
    ({"a b:0": 1}, "with a Kafka topic name"),
    ({"clicks:": 1}, "partition 'clicks:': expected a non-negative integer"),
    ({"00": 1}, "found '00'"),  # one partition has one spelling: "0" and "00" never both
    ({"1_0": 1}, "found '1_0'"),
    ({"\u0663": 1}, "found"),  # an Arabic-Indic three
    ({"clicks:01": 1}, "found '01'"),
])
def test_invalid_topic_partitions_are_refused(raw: dict[object, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Offsets(raw)
