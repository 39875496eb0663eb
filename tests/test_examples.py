"""The example specs in ``specs/examples``: each ingests what Druid would from known records, or is refused
naming the field we do not implement (never accepted and ignored).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import datasketches as ds

from indexing_task.rollup import Rollup
from indexing_task.rollup_schema import RollupSchema
from specs import load_example
from specs.loader import EXAMPLES_DIR


def ingest(name: str, records: list[dict[str, Any]] | list[bytes]) -> tuple[list[dict[str, Any]], int]:
    """The rolled-up rows of ``records`` (JSON objects, or raw values) under example ``name`` (times as ISO text),
    and how many were dropped.
    """
    spec = load_example(name)
    rollup = Rollup(RollupSchema.from_spec(spec.spec.data_schema, spec.spec.io_config.input_format))
    parsed = rollup.parse([r if isinstance(r, bytes) else json.dumps(r).encode() for r in records])
    assert parsed.bad_count == 0, parsed.bad_samples
    rows = [{**row, "__time": row["__time"].astimezone(UTC).isoformat()}
            for _, _, table in rollup.split_by_segment(rollup.merge([parsed.rows])) for row in table.to_pylist()]
    return rows, parsed.thrown_away


def test_every_example_is_covered_here() -> None:
    assert {p.stem for p in EXAMPLES_DIR.glob("*.json")} == {
        "events", "wikipedia", "transform", "flatten", "discovery", "csv", "avro", "typed-discovery", "sketches"}


def test_transform_example() -> None:
    def record(hour: int, animal: str, location: int, number: int) -> dict[str, Any]:
        return {"timestamp": f"2018-01-01T{hour:02d}:01:35Z", "animal": animal, "location": location,
                "number": number}
    rows, dropped = ingest("transform", [record(7, "octopus", 1, 100), record(5, "mongoose", 2, 200),
                                         record(6, "snake", 3, 300), record(1, "lion", 1, 400)])
    assert dropped == 1  # the lion: neither super-mongoose, nor 300 tripled, nor location >= 3
    assert rows == [
        {"__time": "2018-01-01T05:00:00+00:00", "animal": "super-mongoose", "location": "2", "triple-number": 600,
         "count": 1, "number": 200, "triple-number-sum": 600},
        {"__time": "2018-01-01T06:00:00+00:00", "animal": "super-snake", "location": "3", "triple-number": 900,
         "count": 1, "number": 300, "triple-number-sum": 900},
        {"__time": "2018-01-01T07:00:00+00:00", "animal": "super-octopus", "location": "1", "triple-number": 300,
         "count": 1, "number": 100, "triple-number-sum": 300}]


def test_flatten_example() -> None:
    rows, _ = ingest("flatten", [{"timestamp": "2015-09-12T12:10:53.155Z", "dim1": "a", "foo": {"bar1": "b"},
                                  "hello": [1.0, 2.0, 3.0], "baz": [1, 2, 3], "metric1": 4.5}])
    assert rows == [{"__time": "2015-09-12T12:10:53.155000+00:00", "dim1": "a", "foo.bar1": "b",
                     "path-first-hello": "1.0", "jq-first-hello": "1.0", "baz0": "3", "count": 1, "metric1-sum": 4.5}]


def test_discovery_example() -> None:
    base = datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000
    rows, _ = ingest("discovery", [
        {"time": int(base) + 1_000, "page": "Main", "user": "ann", "comment": "fix", "added": 3},
        {"time": int(base) + 2_000, "page": "Main", "user": "ann", "comment": "typo", "added": 4},
        {"time": int(base) + 3_000, "page": "Talk", "added": 1}])
    assert rows == [
        {"__time": "2026-11-01T00:00:00+00:00", "page": "Main", "user": "ann", "edits": 2, "added": 7},
        {"__time": "2026-11-01T00:00:00+00:00", "page": "Talk", "user": None, "edits": 1, "added": 1}]


def test_csv_example() -> None:
    rows, _ = ingest("csv", [b"2013-08-31T01:02:33Z,Gypsy Danger,en,nuclear,true,57",
                             b'2013-08-31T01:40:00Z,Gypsy Danger,en,nuclear,false,10\n',
                             b'2013-08-31T03:32:45Z,"Striker, Eureka",,speed,false,459'])
    assert rows == [
        {"__time": "2013-08-31T01:00:00+00:00", "page": "Gypsy Danger", "language": "en", "user": "nuclear",
         "count": 2, "added": 67},
        {"__time": "2013-08-31T03:00:00+00:00", "page": "Striker, Eureka", "language": None, "user": "speed",
         "count": 1, "added": 459}]


def test_avro_example() -> None:
    import io

    import fastavro

    schema = fastavro.parse_schema(load_example("avro").spec.io_config.input_format.avro_bytes_decoder.avro_schema)

    def avro(millis: int, page: str, user: str | None, country: str, added: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, {"timestamp": millis, "page": page, "user": user,
                                                 "geo": {"country": country}, "added": added})
        return out.getvalue()

    base = 1_377_910_953_000  # 2013-08-31T01:02:33Z
    rows, _ = ingest("avro", [avro(base, "Gypsy Danger", "nuclear", "US", 57),
                              avro(base + 60_000, "Gypsy Danger", "nuclear", "US", 10),
                              avro(base + 3 * 3_600_000, "Striker Eureka", None, "AU", 459)])
    assert rows == [
        {"__time": "2013-08-31T01:00:00+00:00", "page": "Gypsy Danger", "user": "nuclear", "country": "US",
         "count": 2, "added": 67},
        {"__time": "2013-08-31T04:00:00+00:00", "page": "Striker Eureka", "user": None, "country": "AU",
         "count": 1, "added": 459}]


def test_sketches_example() -> None:
    records = [{"ts": f"2024-05-01T10:00:{second:02d}Z", "country": country, "user": user}
               for second, (country, user) in enumerate([("NL", "ann"), ("NL", "bob"), ("NL", "ann"), ("DE", "cy")])]
    rows, _ = ingest("sketches", records)
    users = {row["country"]: ds.compact_theta_sketch.deserialize(row["users"]).get_estimate() for row in rows}
    assert [(row["country"], row["count"]) for row in rows] == [("DE", 1), ("NL", 3)]
    assert users == {"NL": 2.0, "DE": 1.0}  # a theta sketch counts exactly below its size


def test_typed_discovery_example() -> None:
    """Druid's type-aware discovery: LONG, DOUBLE (and booleans as LONG 1/0) and STRING columns, no rollup."""
    rows, _ = ingest("typed-discovery", [
        {"time": "2024-01-01T00:00:01Z", "user": "ann", "latency": 12, "ratio": 0.5, "mobile": True},
        {"time": "2024-01-01T00:00:02Z", "user": "bob", "latency": 7, "ratio": 1, "mobile": False, "extra": None}])
    assert rows == [
        {"__time": "2024-01-01T00:00:01+00:00", "latency": 12, "mobile": 1, "ratio": 0.5, "user": "ann"},
        {"__time": "2024-01-01T00:00:02+00:00", "latency": 7, "mobile": 0, "ratio": 1.0, "user": "bob"}]
