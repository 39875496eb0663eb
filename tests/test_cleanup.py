"""Cleanup on real PostgreSQL and real files: unused segments past retention and old orphans go,
a file of a used segment never does, even with zero retention and zero grace.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import sqlalchemy as sa

from segment_store import DeepStorage, cleanup, mark_unused, mark_used, visible_segments
from segment_store.schema import segments as segments_t
from tests.helpers import ON_EVERY_DEEP_STORAGE, file_exists, overlord_cli
from tests.test_timeline import HOUR, T0, fake_compact, publish_random, random_rows, write_segment

pytestmark = ON_EVERY_DEEP_STORAGE


def _setup(engine: sa.Engine, root: str, datasource: str) -> dict[str, object]:
    """Hour 0 compacted (3 unused segments), hour 1 used as published, orphans, a foreign file."""
    rng = random.Random(21)
    for _ in range(3):
        publish_random(engine, root, datasource, rng, T0, 20)
    replaced = visible_segments(engine, datasource, (T0, T0 + HOUR))
    assert fake_compact(engine, root, datasource, T0).ok
    for _ in range(2):
        publish_random(engine, root, datasource, rng, T0 + HOUR, 20)
    orphans = [write_segment(root, datasource, T0 + HOUR, random_rows(rng, 5, T0 + HOUR, T0 + 2 * HOUR)).path
               for _ in range(2)]
    foreign = f"{root}/{datasource}/README.txt"
    with DeepStorage(root).fs.open(foreign, "w") as out:
        out.write("not a segment file")
    return {"replaced": replaced, "orphans": orphans, "foreign": foreign}


def _used_files_read_back(engine: sa.Engine, datasource: str) -> int:
    with engine.connect() as conn:
        paths = conn.execute(sa.select(segments_t.c.path).where(
            (segments_t.c.datasource == datasource) & segments_t.c.used)).scalars().all()
    return sum(pq.read_table(p).num_rows for p in paths)


def test_zero_retention_and_grace_delete_unused_and_orphans_but_never_a_used_file(engine, datasource, deep_storage):
    made = _setup(engine, deep_storage, datasource)
    visible_before = [(s.id, s.path) for s in visible_segments(engine, datasource)]
    rows_before = _used_files_read_back(engine, datasource)
    # An unused row that shares its file with a used one (never produced by this code): the file stays.
    shared = visible_segments(engine, datasource)[-1]
    with engine.begin() as conn:
        conn.execute(segments_t.insert().values(
            id=f"shared-{uuid.uuid4().hex[:6]}", datasource=datasource, interval_start=shared.interval_start,
            interval_end=shared.interval_end, version=0, partition_num=0, path=shared.path,
            size_bytes=shared.size_bytes, num_rows=shared.num_rows, used=False))
        conn.execute(sa.text("UPDATE segments SET used_status_updated_at = now() - interval '1 hour' "
                             "WHERE datasource = :ds AND NOT used"), {"ds": datasource})

    report = cleanup(engine, DeepStorage(deep_storage), datasource, retention=timedelta(0),
                     orphan_grace=timedelta(0), now=datetime.now(UTC) + timedelta(seconds=5))

    replaced = made["replaced"]
    assert sorted(report.unused_segments) == sorted(s.id for s in replaced)
    assert sorted(report.orphan_files) == sorted(made["orphans"]) and report.young_orphans_kept == 0
    assert not any(file_exists(p) for p in [*made["orphans"], *(s.path for s in replaced)])
    if DeepStorage(deep_storage).is_local:  # object stores have no directories
        assert all(not Path(s.path).parent.exists() for s in replaced)  # empty attempt directories go too
    assert file_exists(made["foreign"])
    assert [(s.id, s.path) for s in visible_segments(engine, datasource)] == visible_before
    assert _used_files_read_back(engine, datasource) == rows_before  # every used file exists and reads back
    again = cleanup(engine, DeepStorage(deep_storage), datasource, retention=timedelta(0),
                    orphan_grace=timedelta(0), now=datetime.now(UTC) + timedelta(seconds=5))
    assert again.unused_segments == () and again.orphan_files == ()


def test_young_orphans_and_recently_unused_segments_are_kept(engine, datasource, deep_storage):
    made = _setup(engine, deep_storage, datasource)

    dry = cleanup(engine, DeepStorage(deep_storage), datasource, retention=timedelta(0),
                  orphan_grace=timedelta(0), now=datetime.now(UTC) + timedelta(seconds=5), dry_run=True)
    kept = cleanup(engine, DeepStorage(deep_storage), datasource)  # one day of retention and of grace

    assert dry.dry_run and len(dry.unused_segments) == 3 and len(dry.orphan_files) == 2
    assert kept.unused_segments == () and kept.orphan_files == () and kept.young_orphans_kept == 2
    assert all(file_exists(p) for p in [*made["orphans"], *(s.path for s in made["replaced"])])


def test_cleanup_command_line(stack, engine, datasource, deep_storage):
    _setup(engine, deep_storage, datasource)
    env = {**stack.as_env(), "OVERLORD_DEEP_STORAGE": deep_storage}

    result = overlord_cli("cleanup", "--retention", "PT0S", "--orphan-grace", "PT0S", env=env)

    assert result.returncode == 0, result.stderr
    assert "deleted 3 unused segment(s) and 2 orphan file(s)" in result.stdout
    assert _used_files_read_back(engine, datasource) == 100  # compacted hour 0 (60 rows) and hour 1 (40)


def test_segments_compaction_replaced_go_sooner_than_dropped_ones(engine, datasource, deep_storage):
    made = _setup(engine, deep_storage, datasource)
    dropped = mark_unused(engine, datasource, interval=(T0 + HOUR, T0 + 2 * HOUR))  # hour 1: nothing replaces it
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE segments SET used_status_updated_at = now() - interval '1 hour' "
                             "WHERE datasource = :ds AND NOT used"), {"ds": datasource})

    report = cleanup(engine, DeepStorage(deep_storage), datasource, retention=timedelta(days=1),
                     replaced_retention=timedelta(minutes=30))

    replaced = made["replaced"]
    assert sorted(report.unused_segments) == sorted(s.id for s in replaced)  # overshadowed by the compaction
    assert not any(file_exists(s.path) for s in replaced)
    assert dropped and mark_used(engine, datasource, segment_ids=dropped) == dropped  # a drop can still be undone
