"""The segment cache on S3 (moto), real PostgreSQL, DuckDB and Spark: queries read local copies, the
same answers as Spark over the object store; copies follow the timeline, stay within their bound,
survive a restart verified, and are never read once their segment is replaced.
"""

from __future__ import annotations

import os
import random
import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fsspec
import httpx
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import s3fs
from prometheus_client.parser import text_string_to_metric_families

from overlord.dev.sample_data import make_sample_events, produce
from overlord.http.app import create_app
from overlord.query.engine import QueryLimits, execute_sql
from overlord.query.local_engine import LocalEngine
from segment_store import segment_cache, visible_segments
from segment_store.records import SegmentRecord
from segment_store.segment_cache import SegmentCache, checksum, copy_name, keep_incoming
from tests.helpers import committed_total, served, spec_json, start_overlord, wait_until
from tests.test_timeline import HOUR, T0, fake_compact, publish_segments, random_rows, write_segment

QUERY = 'SELECT country, SUM("count") AS events, SUM(value_sum) AS v FROM "{}" GROUP BY country ORDER BY country'


@pytest.fixture()
def on_s3(engine, s3_endpoint) -> tuple[str, str]:
    """A datasource of three segments over two hours, on a new bucket: (datasource, root)."""
    datasource = f"cache-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(datasource)
    root = f"s3://{datasource}"
    rng = random.Random(3)
    for start in (T0, T0, T0 + HOUR):
        table = random_rows(rng, 50, start, start + HOUR)
        times = pc.min_max(table.column("__time")).as_py()
        segment = write_segment(root, datasource, start, table)
        publish_segments(engine, datasource, replace(segment, details={
            **segment.details, "min_time": times["min"].isoformat(), "max_time": times["max"].isoformat()}))
    return datasource, root


def synced(cache: SegmentCache, engine, datasource: str) -> SegmentCache:
    """``cache`` synced with the datasource's visible segments (other tests' are left out), prefetches done."""
    assert cache.owned.wait(10)
    cache.sync(visible_segments(engine, datasource))
    cache._pool.submit(lambda: None).result()  # noqa: SLF001 (the prefetches queued before it have started)
    _drain(cache)
    return cache


def _drain(cache: SegmentCache) -> None:
    for future in list(cache._downloads.values()):  # noqa: SLF001
        future.result()


def answer(spark, engine, datasource: str, local: LocalEngine | None = None) -> tuple[list[dict], str]:
    result = execute_sql(spark, engine, QUERY.format(datasource), limits=QueryLimits(), local=local)
    return result.table.to_pylist(), result.engine


def test_a_warm_cache_answers_on_duckdb_without_the_object_store(spark, engine, on_s3, tmp_path):
    datasource, root = on_s3
    expected, by = answer(spark, engine, datasource)
    assert by == "spark"
    cache = synced(SegmentCache(str(tmp_path / "cache"), 10**9), engine, datasource)
    assert (cache.stats.downloads, cache.stats.files) == (3, 3)
    local = LocalEngine(root, 2**30, cache=cache)

    s3fs.S3FileSystem(skip_instance_cache=True).rm(root, recursive=True)  # nothing left to read there

    assert answer(spark, engine, datasource, local) == (expected, "duckdb")
    assert cache.stats.downloads == 3
    spark_only = LocalEngine(root, 0, cache=cache)  # every query to Spark: it reads the copies too
    assert answer(spark, engine, datasource, spark_only) == (expected, "spark")


def test_a_cold_query_downloads_only_what_it_reads_once(spark, engine, on_s3, tmp_path):
    datasource, root = on_s3
    cache = SegmentCache(str(tmp_path / "cache"), 10**9)
    assert cache.owned.wait(10)
    local = LocalEngine(root, 2**30, cache=cache)
    one_hour = (f'SELECT COUNT(*) AS n FROM "{datasource}" WHERE __time >= TIMESTAMP \'2026-11-01 01:00:00\' '
                "AND __time < TIMESTAMP '2026-11-01 02:00:00'")
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        execute_sql(spark, engine, one_hour, local=local).table.to_pylist())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [[{"n": 50}]] * 4
    assert (cache.stats.downloads, cache.stats.files) == (1, 1)  # the second hour's file, once for all four


def test_replaced_segments_leave_the_cache_and_are_never_read(spark, engine, on_s3, tmp_path):
    datasource, root = on_s3
    cache = synced(SegmentCache(str(tmp_path / "cache"), 10**9), engine, datasource)
    before = {s.path for s in visible_segments(engine, datasource)}
    with cache.lease(visible_segments(engine, datasource), download=False) as held:
        assert fake_compact_on_s3(engine, root, datasource)
        synced(cache, engine, datasource)
        assert set(held.values()) <= {str(p) for p in (tmp_path / "cache").glob("*.parquet")}  # a query holds them
    synced(cache, engine, datasource)
    after = {s.path for s in visible_segments(engine, datasource)}
    names = {p.name for p in (tmp_path / "cache").glob("*.parquet")}
    assert {copy_name(path) for path in after} <= names  # (other tests' datasources have copies too)
    assert not names & {copy_name(path) for path in before - after}
    local = LocalEngine(root, 2**30, cache=cache)
    rows, by = answer(spark, engine, datasource, local)
    assert by == "duckdb"
    assert rows == answer(spark, engine, datasource)[0]


def fake_compact_on_s3(engine, root: str, datasource: str) -> bool:
    """Swap one new file in for the first hour's two segments."""
    return fake_compact(engine, root, datasource, T0).ok


def test_the_cache_stays_within_its_bound_evicting_the_least_recently_used(engine, on_s3, tmp_path):
    datasource, _ = on_s3
    segments = visible_segments(engine, datasource)
    bound = sum(sorted(s.size_bytes for s in segments)[-2:])  # room for two files, not three
    cache = synced(SegmentCache(str(tmp_path / "cache"), bound), engine, datasource)
    assert cache.stats.files == 2 and cache.stats.size_bytes <= bound
    first, *rest = segments
    with cache.lease([first]) as held:
        assert first.path in held
        assert cache.stats.size_bytes <= bound
        with cache.lease(rest) as others:  # the held file stays; one of the others does not fit
            assert len(others) == 1
    assert _disk_bytes(tmp_path / "cache") == cache.stats.size_bytes <= bound


def _disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.parquet"))


def test_copies_survive_a_restart_verified(engine, on_s3, tmp_path):
    datasource, _ = on_s3
    directory = str(tmp_path / "cache")
    first = synced(SegmentCache(directory, 10**9), engine, datasource)
    segments = visible_segments(engine, datasource)
    damaged = os.path.join(directory, copy_name(segments[0].path))
    first.close()
    with open(damaged, "r+b") as f:  # same size, one byte flipped: only the checksum tells
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0xFF]))

    second = synced(SegmentCache(directory, 10**9), engine, datasource)

    assert (second.stats.rejected, second.stats.downloads, second.stats.files) == (1, 1, 3)
    with open(damaged, "rb") as f, s3fs.S3FileSystem(skip_instance_cache=True).open(segments[0].path) as remote:
        assert f.read() == remote.read()


def test_a_second_process_caches_nothing_until_the_first_is_gone(engine, on_s3, tmp_path):
    directory = str(tmp_path / "cache")
    first = SegmentCache(directory, 10**9)
    assert first.owned.wait(10)
    standby = SegmentCache(directory, 10**9)
    assert not standby.owned.wait(0.5)
    synced_standby = standby.sync  # a sync before it owns the directory does nothing
    synced_standby(visible_segments(engine, on_s3[0]))
    assert standby.stats.files == 0
    first.close()
    assert standby.owned.wait(10)


def test_a_publishers_copy_is_adopted_without_a_download(engine, s3_endpoint, tmp_path):
    datasource = f"cache-{uuid.uuid4().hex[:8]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(datasource)
    directory = str(tmp_path / "cache")
    cache = synced(SegmentCache(directory, 10**9), engine, datasource)
    segment = write_segment(f"s3://{datasource}", datasource, T0, random_rows(random.Random(5), 20, T0, T0 + HOUR))
    with s3fs.S3FileSystem(skip_instance_cache=True).open(segment.path, "rb") as f:
        keep_incoming(directory, segment.path, f.read())
    synced(cache, engine, datasource)
    assert cache.stats.adopted == 0 and os.listdir(os.path.join(directory, "incoming"))  # not visible yet

    publish_segments(engine, datasource, segment)
    synced(cache, engine, datasource)

    assert (cache.stats.adopted, cache.stats.downloads) == (1, 0)
    assert pq.read_table(os.path.join(directory, copy_name(segment.path))).num_rows == 20


@pytest.mark.long  # an overlord with its query engine's own Spark application
def test_an_overlord_on_s3_answers_from_copies_its_tasks_left(stack, engine, spark, s3_endpoint, make_topic,
                                                             datasource, tmp_path):
    """Ingested segments reach the cache without a download; queries are DuckDB's, metrics say so."""
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(datasource)
    overlord = start_overlord(stack, engine, spark, f"s3://{datasource}", segment_cache_dir=str(tmp_path / "cache"),
                              query_engine_eager=True)
    app = create_app(overlord, authenticator=None)
    try:
        with served(app) as url, httpx.Client(base_url=url, timeout=120) as http:
            topic = make_topic(2)
            assert http.post("/druid/indexer/v1/supervisor", json=spec_json(datasource, topic)).status_code == 200
            produce(stack.bootstrap_servers, topic, make_sample_events(3_000, bad_every=0).records, 2)
            wait_until(lambda: committed_total(overlord.engine, datasource) == 3_000, "ingestion", 120)
            wait_until(lambda: cache_metric(http, "files") == len(visible_segments(overlord.engine, datasource)) > 0,
                       "the cache to hold every visible segment", 60)

            answer = http.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM "{datasource}"'})

            assert answer.status_code == 200 and answer.json() == [{"n": 3_000}], answer.text
            assert answer.headers["X-Overlord-Query-Engine"] == "duckdb"
            assert cache_metric(http, "downloads") == 0  # the tasks' own copies, adopted
            assert cache_metric(http, "adopted") == cache_metric(http, "files")
            assert cache_metric(http, "hits") >= cache_metric(http, "files")
    finally:
        overlord.stop(grace_s=10)
        overlord.engine.dispose()


def cache_metric(http: httpx.Client, name: str) -> float:
    families = text_string_to_metric_families(http.get("/metrics").text)
    return next((s.value for f in families if f.name == f"overlord_segment_cache_{name}" for s in f.samples
                 if not s.name.endswith("_created")), -1.0)


def test_a_copy_being_written_is_left_alone_and_a_failed_copy_never_fails_its_task(engine, on_s3, tmp_path):
    """A sync used to delete a publisher's half-written copy (its rename then failed, and the task with it)."""
    datasource, _ = on_s3
    directory = tmp_path / "cache"
    cache = synced(SegmentCache(str(directory), 10**9), engine, datasource)
    writing = directory / "incoming" / f"{copy_name('s3://x/y.parquet')}.123.tmp"
    writing.write_bytes(b"half")
    synced(cache, engine, datasource)
    assert writing.exists()

    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    keep_incoming(str(blocked), "s3://x/y.parquet", b"data")  # no error: the copy is a courtesy


def _memory_segment(name: str, data: bytes, day: int = 1) -> SegmentRecord:
    """A segment whose file is in fsspec's in-memory file system (an object store to the cache)."""
    path = f"memory://bucket/ds/{name}.parquet"
    fsspec.filesystem("memory").pipe_file(path.removeprefix("memory:/"), data)
    start = datetime(2024, 1, day, tzinfo=UTC)
    return SegmentRecord(name, "ds", start, start + timedelta(days=1), 1, 0, path, len(data), 1, True,
                         datetime.now(UTC), {"checksum": checksum(data)})


def test_a_copy_adopted_while_its_download_runs_is_counted_once_and_kept_while_held(tmp_path, monkeypatch):
    """Before, both added it: its bytes counted twice, and a sync deleted it under a lease (whose exit then failed)."""
    data = b"x" * 1000
    segment = _memory_segment("race", data)
    cache = SegmentCache(str(tmp_path / "cache"), 10_000)
    assert cache.owned.wait(5)
    keep_incoming(cache.directory, segment.path, data)  # a publisher's copy
    gate, entered = threading.Event(), threading.Event()
    real = segment_cache.url_to_fs

    def slow(url: str, **options):
        fs, file = real(url, **options)
        cat = fs.cat_file

        def held_back(path, *args, **kwargs):
            entered.set()
            gate.wait()
            return cat(path, *args, **kwargs)
        monkeypatch.setattr(fs, "cat_file", held_back)
        return fs, file

    monkeypatch.setattr(segment_cache, "url_to_fs", slow)
    download = cache._download(segment)  # noqa: SLF001 (a query's download, held back mid-way)
    assert entered.wait(5)
    cache.sync([segment])  # adopts the publisher's copy meanwhile
    with cache.lease([segment], download=False) as held:
        gate.set()
        download.result(5)
        cache.sync([])  # replaced: its copy goes once no lease holds it
        assert os.path.exists(held[segment.path])
    assert (cache.stats.files, cache.stats.size_bytes) == (1, 1000)
    cache.sync([])
    assert (cache.stats.files, cache.stats.size_bytes) == (0, 0) and not os.path.exists(held[segment.path])


def test_prefetch_keeps_the_newest_segments_that_fit(tmp_path):
    """Before, every segment was fetched and the oldest were kept (the newest, fetched first, were evicted)."""
    segments = [_memory_segment(f"day{day}", bytes([day]) * 1000, day) for day in range(1, 11)]
    cache = SegmentCache(str(tmp_path / "cache"), 3_000, download_threads=1)
    assert cache.owned.wait(5)
    cache.sync(segments)
    cache._pool.submit(lambda: None).result()  # noqa: SLF001 (the prefetches queued before it have run)
    assert cache.stats.downloads == 3 and cache.stats.evictions == 0
    assert {path for path in segments_held(cache, segments)} == {s.path for s in segments[-3:]}


def segments_held(cache: SegmentCache, segments: list[SegmentRecord]) -> set[str]:
    return {s.path for s in segments if cache.copy_of(s.path) is not None}
