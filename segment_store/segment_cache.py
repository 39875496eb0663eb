"""A bounded local directory of object-store segment files, so queries do not read the object store.

Druid's historicals never serve a query from deep storage: they keep a local segment cache. This
is ours, kept by the query engine's process:

- **Keyed by path.** A segment file is written once, under a path of its own, and never changed,
  so a copy is named after its path (``{sha256(path)}.parquet``) and is valid as long as its
  segment row exists.
- **Verified before use.** A copy is written under a temporary name and renamed once its size
  (and checksum, where the row has one) matches the segment row; copies found at start are
  checked the same way before the first query may read them.
- **Filled twice.** :meth:`SegmentCache.sync` (every second or so) downloads segments as they
  become visible, newest first, and adopts the copy a publisher on this machine left in
  ``incoming/`` (:func:`keep_incoming`) instead of downloading it; :meth:`SegmentCache.lease`
  downloads what a query needs and is missing (one download per file, however many queries wait).
- **Emptied.** A copy whose segment is no longer visible (replaced, dropped, killed) is deleted
  at the next sync once no query holds it; to stay within ``max_bytes`` the least recently used
  copies no query holds are evicted. A file that does not fit is not cached: its query reads the
  object store.
- **One owner.** One process per directory (a lock file): a second one (the standby query
  engine) caches nothing until the first has exited.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from fsspec.core import url_to_fs

from segment_store.records import SegmentRecord
from segment_store.timeline import timeline_mark, visible_set

__all__ = ["CacheStats", "SegmentCache", "checksum", "copy_name", "is_object_store", "keep_incoming"]

logger = logging.getLogger(__name__)

INCOMING = "incoming"
INCOMING_MAX_AGE_S = 3_600.0
"""A publisher's copy whose segment has not become visible within this is dropped (its task failed)."""


def is_object_store(url: str) -> bool:
    """Whether ``url`` (a deep storage root or a segment's path) is on an object store: files worth a copy."""
    return "://" in url and not url.startswith(("file://", "hdfs://"))


def checksum(data: bytes) -> str:
    """The checksum a segment's descriptor records for its file's bytes."""
    return f"crc32:{zlib.crc32(data):08x}"


def copy_name(path: str) -> str:
    """The file name of the copy of the segment file at ``path``."""
    return hashlib.sha256(path.encode()).hexdigest()[:40] + ".parquet"


def keep_incoming(directory: str, path: str, data: bytes) -> None:
    """Leave a copy of a file just written to deep storage, for the cache to adopt once it is visible.

    A courtesy: a copy that cannot be written (a full disk) is logged, never the writer's failure.
    """
    incoming = os.path.join(directory, INCOMING)
    try:
        os.makedirs(incoming, exist_ok=True)
        _write_atomically(os.path.join(incoming, copy_name(path)), data)
    except OSError as exc:
        logger.warning("segment cache: no copy of %s left in %s: %s", path, incoming, exc)


@dataclass
class CacheStats:
    """What the cache did since it started (gauges and counters for ``/metrics``)."""

    hits: int = 0
    """Segment files a query read from a copy."""
    misses: int = 0
    """Segment files a query needed that had no copy."""
    downloads: int = 0
    downloaded_bytes: int = 0
    adopted: int = 0
    """Copies a publisher left, taken without a download."""
    evictions: int = 0
    rejected: int = 0
    """Copies that failed verification (deleted)."""
    size_bytes: int = 0
    files: int = 0
    max_bytes: int = 0


@dataclass
class _Copy:
    local: str
    size: int
    pins: int = 0
    """Leases holding it: it is not deleted while any does."""


class SegmentCache:
    """Copies of segment files under ``directory``, at most ``max_bytes`` of them."""

    def __init__(self, directory: str, max_bytes: int, storage_options: Mapping[str, Any] | None = None,
                 download_threads: int = 8) -> None:
        self.directory = os.path.abspath(directory)
        self.max_bytes = max_bytes
        self._options = dict(storage_options or {})
        os.makedirs(os.path.join(self.directory, INCOMING), exist_ok=True)
        self._lock = threading.Lock()
        self._copies: OrderedDict[str, _Copy] = OrderedDict()  # by path, least recently used first
        self._downloads: dict[str, Future[bool]] = {}
        self._reserved = 0  # bytes of copies being written, counted against max_bytes
        self._pool = ThreadPoolExecutor(download_threads, thread_name_prefix="segment-cache-prefetch")
        self._query_pool = ThreadPoolExecutor(download_threads, thread_name_prefix="segment-cache-query")
        self._found: dict[str, int] | None = None  # copies on disk at start, by name: claimed at the first sync
        self._seen: set[str] = set()
        self.stats = CacheStats(max_bytes=max_bytes)
        self._closed = threading.Event()
        self._owner = open(os.path.join(self.directory, ".lock"), "a+")  # noqa: SIM115 (held for the process's life)
        self.owned = threading.Event()
        threading.Thread(target=self._take_ownership, name="segment-cache-owner", daemon=True).start()

    def keep_in_sync(self, engine: sa.Engine, interval_s: float = 1.0) -> None:
        """Sync with the timeline (:meth:`sync`) whenever it has changed, checked every ``interval_s``, forever."""
        def run() -> None:
            self.owned.wait()
            last, failing = None, False
            while not self._closed.is_set():
                try:
                    mark = timeline_mark(engine)
                    if mark != last:
                        self.sync(s for records in visible_set(engine).segments.values() for s in records)
                        last = mark
                    if failing:
                        logger.info("segment cache: in sync again")
                    failing = False
                except Exception:
                    if not failing:  # once, not every second while the metadata store is away
                        logger.warning("segment cache: sync failed; trying again every %g s", interval_s,
                                       exc_info=True)
                    failing = True
                self._closed.wait(interval_s)

        threading.Thread(target=run, name="segment-cache-sync", daemon=True).start()

    def _take_ownership(self) -> None:
        fcntl.flock(self._owner, fcntl.LOCK_EX)  # blocks while another process owns the directory
        found = {}
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".parquet") and entry.is_file():
                found[entry.name] = entry.stat().st_size
            elif entry.name.endswith(".tmp"):
                os.unlink(entry.path)  # a copy a crash left half written
        with self._lock:
            self._found = found
        self.owned.set()
        logger.info("segment cache %s: %d files from before, verified at the first sync", self.directory, len(found))

    @contextmanager
    def lease(self, segments: Iterable[SegmentRecord], download: bool = True,
              timeout_s: float | None = None) -> Iterator[dict[str, str]]:
        """Pin copies of ``segments`` for the block: their local paths by deep-storage path.

        With ``download``, missing copies are downloaded first (in parallel, waited for at most
        ``timeout_s``); a segment without a copy then (too big for the cache, a failed or slow
        download) is left out of the answer.
        """
        wanted = {s.path: s for s in segments if is_object_store(s.path)}
        if download and self.owned.is_set():
            futures = [self._download(s, for_query=True) for s in wanted.values() if s.path not in self._copies]
            wait([f for f in futures if f is not None], timeout_s)
        held: list[_Copy] = []
        pinned: dict[str, str] = {}
        with self._lock:
            for path in wanted:
                copy = self._copies.get(path)
                if copy is None:
                    self.stats.misses += 1
                    continue
                copy.pins += 1
                self._copies.move_to_end(path)
                held.append(copy)
                pinned[path] = copy.local
            self.stats.hits += len(pinned)
        try:
            yield pinned
        finally:
            with self._lock:
                for copy in held:
                    copy.pins -= 1

    def close(self) -> None:
        """Stop syncing and give the directory up (to another process); the copies stay for the next owner."""
        self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._query_pool.shutdown(wait=True, cancel_futures=True)
        self._owner.close()

    @property
    def downloading(self) -> int:
        """Downloads under way."""
        return len(self._downloads)

    def copy_of(self, path: str) -> str | None:
        """The local path of ``path``'s copy if the cache holds one now (not held: it may go at any time)."""
        copy = self._copies.get(path)
        return copy.local if copy is not None else None

    def sync(self, visible: Iterable[SegmentRecord]) -> None:
        """Bring the cache in line with the visible segments: adopt, verify, delete, prefetch (newest first)."""
        if not self.owned.is_set():
            return
        segments = {s.path: s for s in visible if is_object_store(s.path)}
        names = {copy_name(path): s for path, s in segments.items()}
        with self._lock:
            found, self._found = self._found, None
            gone = [path for path, copy in self._copies.items() if path not in segments and copy.pins == 0]
            for path in gone:
                self._remove(path)
        for name, size in (found or {}).items():  # copies kept across a restart
            segment = names.get(name)
            local = os.path.join(self.directory, name)
            if segment is None or not self._verified(local, segment, size):
                os.unlink(local)
                continue
            with self._lock:
                self._add(segment.path, local, size)
        if found:
            with self._lock:
                self._evict_for(0)  # the limit may be lower than before the restart
        self._adopt_incoming(names)
        new = [s for path, s in segments.items() if path not in self._seen and path not in self._copies]
        budget = self._free() if not self._seen else self.max_bytes  # at start, no eviction for a prefetch
        self._seen = set(segments)
        chosen = []
        for segment in sorted(new, key=lambda s: (s.interval_end, s.created_at), reverse=True):
            if segment.size_bytes <= budget:
                chosen.append(segment)
                budget -= segment.size_bytes
        for segment in reversed(chosen):  # the newest downloaded last: the most recently used of them
            self._download(segment)

    def _adopt_incoming(self, names: Mapping[str, SegmentRecord]) -> None:
        incoming = os.path.join(self.directory, INCOMING)
        now = time.time()
        for entry in os.scandir(incoming):
            segment = names.get(entry.name)
            try:
                stat = entry.stat()
            except FileNotFoundError:  # a publisher's rename, or an earlier sync's delete
                continue
            if segment is None:  # not published yet (or being written: ``.tmp``), or never will be
                if now - stat.st_mtime > INCOMING_MAX_AGE_S:
                    _unlink(entry.path)
                continue
            local = os.path.join(self.directory, entry.name)
            if segment.path in self._copies or not self._verified(entry.path, segment, stat.st_size):
                _unlink(entry.path)
                continue
            with self._reservation(segment.size_bytes) as fits:
                if not fits:
                    _unlink(entry.path)
                    continue
                os.replace(entry.path, local)
                with self._lock:
                    self._add(segment.path, local, segment.size_bytes)
                    self.stats.adopted += 1

    def _download(self, segment: SegmentRecord, for_query: bool = False) -> Future[bool] | None:
        """The download of ``segment``'s file (started if none runs); None if it cannot fit.

        A query's downloads have threads of their own: they never queue behind prefetches (a
        prefetch of the file not yet started is taken over).
        """
        with self._lock:
            running = self._downloads.get(segment.path)
            if running is not None and not (for_query and running.cancel()):
                return running
            if segment.size_bytes > self.max_bytes:
                return None
            future = (self._query_pool if for_query else self._pool).submit(self._fetch, segment)
            self._downloads[segment.path] = future
            return future

    def _fetch(self, segment: SegmentRecord) -> bool:
        try:
            if segment.path in self._copies:
                return True
            with self._reservation(segment.size_bytes) as fits:
                if not fits:
                    return False
                fs, file = url_to_fs(segment.path, **self._options)
                data = fs.cat_file(file)
                if not self._matches(data, segment):
                    logger.warning("segment cache: %s does not match its row (%d bytes, the row says %d); not cached",
                                   segment.path, len(data), segment.size_bytes)
                    self.stats.rejected += 1
                    return False
                local = os.path.join(self.directory, copy_name(segment.path))
                _write_atomically(local, data)
                with self._lock:
                    self._add(segment.path, local, len(data))
                    self.stats.downloads += 1
                    self.stats.downloaded_bytes += len(data)
                return True
        except Exception:
            logger.warning("segment cache: could not download %s", segment.path, exc_info=True)
            return False
        finally:
            with self._lock:
                self._downloads.pop(segment.path, None)

    @contextmanager
    def _reservation(self, size: int) -> Iterator[bool]:
        """Room for ``size`` more bytes while the block writes them; False if there is none.

        Least recently used copies no query holds are evicted for it.
        """
        with self._lock:
            fits = self._evict_for(size)
            self._reserved += size if fits else 0
        try:
            yield fits
        finally:
            with self._lock:
                self._reserved -= size if fits else 0

    def _evict_for(self, size: int) -> bool:
        """Evict least recently used copies no query holds until ``size`` more bytes fit (caller holds the lock)."""
        for path in [p for p, c in self._copies.items() if c.pins == 0]:
            if self.stats.size_bytes + self._reserved + size <= self.max_bytes:
                break
            self._remove(path)
            self.stats.evictions += 1
        return self.stats.size_bytes + self._reserved + size <= self.max_bytes

    def _free(self) -> int:
        return self.max_bytes - self.stats.size_bytes - self._reserved

    def _add(self, path: str, local: str, size: int) -> None:
        """Record a copy (caller holds the lock); one recorded already (the same file) stays as it is."""
        if path in self._copies:
            return
        self._copies[path] = _Copy(local, size)
        self.stats.size_bytes += size
        self.stats.files += 1

    def _remove(self, path: str) -> None:
        """Delete a copy (caller holds the lock)."""
        copy = self._copies.pop(path)
        _unlink(copy.local)
        self.stats.size_bytes -= copy.size
        self.stats.files -= 1

    def _verified(self, local: str, segment: SegmentRecord, size: int) -> bool:
        if size != segment.size_bytes:
            self.stats.rejected += 1
            return False
        if segment.descriptor.get("checksum") is None:
            return True
        with open(local, "rb") as f:
            ok = self._matches(f.read(), segment)
        self.stats.rejected += not ok
        return ok

    @staticmethod
    def _matches(data: bytes, segment: SegmentRecord) -> bool:
        expected = segment.descriptor.get("checksum")
        return len(data) == segment.size_bytes and (expected is None or checksum(data) == expected)


def _write_atomically(path: str, data: bytes) -> None:
    temporary = f"{path}.{threading.get_ident()}.tmp"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
