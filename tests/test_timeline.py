"""The segment timeline on real PostgreSQL: versions, overshadowing, unused rows, intervals.

Also home of the helpers the query, compaction and cleanup tests share: rolled-up rows in the
``events`` example's schema, written as real Parquet segments and published through the real
publish transaction (consecutive fake offset ranges, no Kafka needed).
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from segment_store import (
    CompactionSwap,
    DeepStorage,
    PublishRequest,
    SegmentDescriptor,
    committed_offsets,
    publish,
    segment_file_path,
    swap_compacted,
    visible,
    visible_by_interval,
    visible_segments,
)
from segment_store.schema import segments as segments_t
from segment_store.timeline import read_segments, visible_totals

HOUR = timedelta(hours=1)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
SCHEMA = pa.schema([("__time", pa.timestamp("ms", tz="UTC")), ("country", pa.string()), ("device", pa.string()),
                    ("count", pa.int64()), ("value_sum", pa.int64()), ("value_min", pa.int64()),
                    ("value_max", pa.int64()), ("price_sum", pa.float64())])
"""What ingestion writes for the ``events`` example spec."""
COUNTRIES = ("DE", "FR", "GB", "IN", "JP", "US")
DEVICES = ("desktop", "mobile", "tablet")


def random_rows(rng: random.Random, n: int, start: datetime, end: datetime) -> pa.Table:
    """``n`` rolled-up rows (distinct minute, country, device) in ``[start, end)``."""
    minutes = int((end - start).total_seconds() // 60)
    keys = rng.sample([(m, c, d) for m in range(minutes) for c in COUNTRIES for d in DEVICES], n)
    rows = []
    for m, country, device in sorted(keys):
        count = rng.randint(1, 5)
        low, high = sorted((rng.randint(-50, 1000), rng.randint(-50, 1000)))
        rows.append({"__time": start + timedelta(minutes=m), "country": country, "device": device, "count": count,
                     "value_sum": rng.randint(low * count, high * count), "value_min": low, "value_max": high,
                     "price_sum": round(rng.random() * 100 * count, 2)})
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def write_segment(root: str, datasource: str, start: datetime, table: pa.Table, end: datetime | None = None,
                  attempt: str | None = None, part: int = 0) -> SegmentDescriptor:
    """Write ``table`` as a segment file in the deep storage layout (not published)."""
    end = end or start + HOUR
    attempt = attempt or f"test-{uuid.uuid4().hex[:8]}"
    path = segment_file_path(root, datasource, start, end, attempt, part)
    written = DeepStorage(root).write_table(path, table)
    return SegmentDescriptor(id=f"{datasource}_{start:%Y%m%dT%H%M}_{attempt}_{part}", datasource=datasource,
                             interval_start=start, interval_end=end, path=path, size_bytes=written.size_bytes,
                             num_rows=table.num_rows,
                             details={"checksum": written.checksum} if written.checksum else {})


def publish_segments(engine: sa.Engine, datasource: str, *segments: SegmentDescriptor) -> None:
    """Publish as the next fake task would: partition 0, one offset further than the last one."""
    stored = committed_offsets(engine, datasource)
    start = stored.offsets.get(0, 0) if stored is not None else 0
    outcome = publish(engine, PublishRequest(
        datasource=datasource, topic="fake", task_id=f"fake-{uuid.uuid4().hex[:6]}", start_offsets={0: start},
        end_offsets={0: start + 1}, initial_offsets={0: 0}, segments=segments))
    assert outcome.ok, outcome.message


def publish_random(engine: sa.Engine, root: str, datasource: str, rng: random.Random, start: datetime,
                   rows: int, end: datetime | None = None) -> pa.Table:
    """Write and publish one segment of random rows; return them."""
    table = random_rows(rng, rows, start, end or start + HOUR)
    publish_segments(engine, datasource, write_segment(root, datasource, start, table, end))
    return table


def publish_hours(engine: sa.Engine, root: str, datasource: str, seed: int, hours: int, per_hour: int,
                  ) -> list[dict[str, Any]]:
    """Publish ``hours`` hour-long segments of ``per_hour`` random rows from ``T0``; return every row."""
    rng = random.Random(seed)
    return pa.concat_tables([publish_random(engine, root, datasource, rng, T0 + hour * HOUR, per_hour)
                             for hour in range(hours)]).to_pylist()


def fake_compact(engine: sa.Engine, root: str, datasource: str, start: datetime, end: datetime | None = None):
    """Swap one new (empty-bodied but real) file in for an interval's visible segments."""
    read = [s for s in visible_segments(engine, datasource, (start, end or start + HOUR))
            if (s.interval_start, s.interval_end) == (start, end or start + HOUR)]
    seg = write_segment(root, datasource, start, pa.concat_tables(pq.read_table(s.path) for s in read), end)
    return swap_compacted(engine, CompactionSwap(datasource, start, end or start + HOUR, read[0].version,
                                                 frozenset(s.id for s in read), (seg,), "job-" + seg.id))


def _insert_row(engine: sa.Engine, datasource: str, start: datetime, end: datetime, version: int, partition: int,
                used: bool = True) -> str:
    seg_id = f"{datasource}_manual_{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.execute(segments_t.insert().values(
            id=seg_id, datasource=datasource, interval_start=start, interval_end=end, version=version,
            partition_num=partition, path=f"/nowhere/{seg_id}.parquet", size_bytes=1, num_rows=1, used=used))
    return seg_id


def counted_as_shown(engine: sa.Engine, datasource: str) -> bool:
    """Whether PostgreSQL's count of the visible segments (the metrics') agrees with :func:`visible`."""
    shown = visible_segments(engine, datasource)
    return visible_totals(engine).get(datasource, (0, 0)) == (len(shown), sum(s.size_bytes for s in shown))


def test_highest_used_version_of_an_interval_overshadows_lower_ones(engine, datasource, deep_storage):
    rng = random.Random(1)
    for _ in range(3):
        publish_random(engine, deep_storage, datasource, rng, T0, 20)
    publish_random(engine, deep_storage, datasource, rng, T0 + HOUR, 20)
    assert [s.version for s in visible_segments(engine, datasource)] == [1, 1, 1, 1]

    assert fake_compact(engine, deep_storage, datasource, T0).ok
    lingering = _insert_row(engine, datasource, T0, T0 + HOUR, 1, 99)  # a used row at the old version

    shown = visible_segments(engine, datasource)
    assert [(s.interval_start, s.version) for s in shown] == [(T0, 2), (T0 + HOUR, 1)]
    assert lingering not in {s.id for s in shown}
    assert counted_as_shown(engine, datasource)
    publish_random(engine, deep_storage, datasource, rng, T0, 5)  # appends go to the current version
    assert [(s.version, s.partition_num) for s in visible_segments(engine, datasource, (T0, T0 + HOUR))] == [
        (2, 0), (2, 1)]


def test_unused_segments_and_orphan_files_are_never_visible(engine, datasource, deep_storage):
    rng = random.Random(2)
    publish_random(engine, deep_storage, datasource, rng, T0, 10)
    _insert_row(engine, datasource, T0, T0 + HOUR, 1, 7, used=False)
    orphan = write_segment(deep_storage, datasource, T0, random_rows(rng, 5, T0, T0 + HOUR))  # never published

    shown = visible_segments(engine, datasource)
    assert len(shown) == 1 and all(s.used for s in shown) and orphan.path not in {s.path for s in shown}
    assert counted_as_shown(engine, datasource)


def test_versions_do_not_overshadow_across_different_intervals(engine, datasource, deep_storage):
    """A DAY interval compacted to v2 must not hide HOUR rows appended later at v1 (after a spec change)."""
    rng = random.Random(3)
    day = (T0, T0 + timedelta(days=1))
    for _ in range(2):
        publish_random(engine, deep_storage, datasource, rng, T0, 10, end=day[1])
    assert fake_compact(engine, deep_storage, datasource, T0, day[1]).ok
    publish_random(engine, deep_storage, datasource, rng, T0 + 3 * HOUR, 10)

    shown = visible_segments(engine, datasource)
    assert [(s.interval_end - s.interval_start, s.version) for s in shown] == [(timedelta(days=1), 2), (HOUR, 1)]
    assert set(visible_by_interval(shown)) == {day, (T0 + 3 * HOUR, T0 + 4 * HOUR)}
    assert counted_as_shown(engine, datasource)


def test_interval_filter_returns_overlapping_segments(engine, datasource, deep_storage):
    rng = random.Random(4)
    for hour in range(4):
        publish_random(engine, deep_storage, datasource, rng, T0 + hour * HOUR, 5)

    def starts(interval):
        return [s.interval_start for s in visible_segments(engine, datasource, interval)]

    assert starts((T0 + HOUR, T0 + 3 * HOUR)) == [T0 + HOUR, T0 + 2 * HOUR]
    assert starts((T0 + 90 * timedelta(minutes=1), T0 + 2 * HOUR + timedelta(minutes=1))) == [
        T0 + HOUR, T0 + 2 * HOUR]
    assert starts((T0 - HOUR, T0)) == []
    assert visible_segments(engine, "no-such-datasource") == []


def test_visible_is_a_pure_function_of_the_records(engine, datasource, deep_storage):
    rng = random.Random(5)
    publish_random(engine, deep_storage, datasource, rng, T0, 5)
    publish_random(engine, deep_storage, datasource, rng, T0, 5)
    assert fake_compact(engine, deep_storage, datasource, T0).ok
    with engine.connect() as conn:
        everything = read_segments(conn, datasource, used_only=False)
    assert [s.version for s in everything] == [1, 1, 2]
    assert [s.version for s in visible(everything)] == [2]
    assert visible(reversed(everything)) == visible(everything)
