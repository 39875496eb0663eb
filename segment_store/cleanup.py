"""Cleanup: delete the files of long-unused segments and the orphan files of tasks that never published.

Two sweeps per datasource, like Druid's kill task:

* **Unused segments.** Rows with ``used = false`` whose ``used_status_updated_at`` is older than
  the retention period (or, for a segment *replaced*, i.e. overshadowed by a used segment of a
  higher version of its interval, as a compaction's inputs are, than the shorter
  ``replaced_retention``), and whose file lies under this deep storage root, are deleted
  (``DELETE ... RETURNING``, guarded again by ``NOT used`` and by "no used row has the same
  path"), then their files; the rows go, as with Druid's kill (the log keeps the history).
  The retention period must exceed the longest query: a query planned before a compaction
  swap may still read the replaced files.
* **Orphans.** Files under ``{root}/{datasource}/`` in the segment layout
  (``{interval}/{attempt}/part-n.parquet``) that no segment row references and that are older
  than the grace period. They are checked against the rows and deleted under the datasource
  lock that publishes take, and a publish checks its files exist under that lock: a file is
  either referenced by a committed row (and kept) or gone before any row can reference it, so
  a short grace period can cost a task a retry, never a published row without its file.

A file referenced by a used row is never deleted, nor one in ``keep`` (the files live Iceberg
snapshots reference, :func:`segment_store.open_tables.live_data_files`): its row stays until a
later run. Nothing outside the segment layout is touched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from segment_store.deep_storage import DeepStorage, modified_at
from segment_store.records import lock_offsets_row
from segment_store.schema import datasource_offsets as offsets_t
from segment_store.schema import segments as segments_t

__all__ = ["CleanupReport", "cleanup"]

logger = logging.getLogger(__name__)

_LAYOUT = re.compile(r"\d{8}T\d{6}\.\d{3}Z_\d{8}T\d{6}\.\d{3}Z/[^/]+/part-\d+\.parquet")
"""A segment file's path below ``{root}/{datasource}/`` (see ``segment_file_path``)."""
_ORPHAN_BATCH = 200
"""Orphans deleted per hold of the datasource lock: short holds, so publishes wait little."""


@dataclass(frozen=True)
class CleanupReport:
    """What one cleanup run deleted (or, with ``dry_run``, would delete)."""

    datasources: tuple[str, ...]
    unused_segments: tuple[str, ...]
    """Ids of unused segments whose rows and files were deleted."""
    orphan_files: tuple[str, ...]
    young_orphans_kept: int
    """Unreferenced files younger than the grace period (perhaps a task about to publish)."""
    bytes_deleted: int
    dry_run: bool


def _known_datasources(engine: sa.Engine, storage: DeepStorage) -> list[str]:
    """Datasources in the metadata store, plus directories at the deep storage root."""
    s, o = segments_t.c, offsets_t.c
    with engine.connect() as conn:
        names = set(conn.execute(sa.select(s.datasource).distinct()).scalars())
        names |= set(conn.execute(sa.select(o.datasource)).scalars())
    try:
        listed = storage.fs.ls(storage.root, detail=True, refresh=True)  # never an object store's cached listing
    except FileNotFoundError:
        listed = []
    names |= {str(i["name"]).rstrip("/").rsplit("/", 1)[-1] for i in listed if i.get("type") == "directory"}
    return sorted(names)


def _delete_files(storage: DeepStorage, paths: Iterable[str]) -> None:
    fs = storage.fs
    parents: set[str] = set()
    for path in paths:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            logger.info("cleanup: %s was already gone", path)
        parents.add(path.rsplit("/", 1)[0])
    if storage.is_local:  # object stores have no directories to leave behind
        for attempt_dir in sorted(parents):
            for directory in (attempt_dir, attempt_dir.rsplit("/", 1)[0]):
                try:
                    fs.rmdir(directory)
                except OSError:
                    break  # not empty (or gone): leave it and its parent


def _sweep_unused(engine: sa.Engine, storage: DeepStorage, datasource: str, cutoff: datetime,
                  replaced_cutoff: datetime, keep: Collection[str], dry_run: bool) -> tuple[list[str], int]:
    """Delete unused rows older than ``cutoff`` (replaced ones: ``replaced_cutoff``), then their files.

    A row whose file a used row shares is kept.
    """
    st = segments_t.c
    other = segments_t.alias("other")
    shared = sa.select(sa.literal(1)).where((other.c.path == st.path) & other.c.used)
    replaced = sa.select(sa.literal(1)).where(
        (other.c.datasource == st.datasource) & (other.c.interval_start == st.interval_start)
        & (other.c.interval_end == st.interval_end) & (other.c.version > st.version) & other.c.used).exists()
    old_enough = (st.used_status_updated_at < cutoff) | ((st.used_status_updated_at < replaced_cutoff) & replaced)
    where = ((st.datasource == datasource) & sa.not_(st.used) & old_enough
             & st.path.startswith(f"{storage.root}/{datasource}/", autoescape=True) & ~shared.exists())
    if keep:
        where &= st.path.not_in(list(keep))
    with engine.begin() as conn:
        if dry_run:
            rows = conn.execute(sa.select(st.id, st.path, st.size_bytes).where(where)).all()
        else:
            rows = conn.execute(segments_t.delete().where(where)
                                .returning(st.id, st.path, st.size_bytes)).all()
    if not dry_run:
        _delete_files(storage, [r.path for r in rows])
    return [r.id for r in rows], sum(int(r.size_bytes) for r in rows)


def _referenced(conn: sa.Connection, storage: DeepStorage, datasource: str) -> set[str]:
    return {storage.fs._strip_protocol(p) for p in conn.execute(
        sa.select(segments_t.c.path).where(segments_t.c.datasource == datasource)).scalars()}


def _sweep_orphans(engine: sa.Engine, storage: DeepStorage, datasource: str, cutoff: datetime,
                   keep: Collection[str], dry_run: bool) -> tuple[list[str], int, int]:
    """Delete layout files under the datasource's directory that no row references, older than ``cutoff``.

    Candidates are listed without a lock; each batch is then checked and deleted under the
    datasource lock that publishes take (which check their files exist under it), so a file
    is either referenced by a committed row and kept, or deleted before any publish of it.
    """
    fs = storage.fs
    prefix = fs._strip_protocol(f"{storage.root}/{datasource}").rstrip("/") + "/"
    listed: dict[str, dict[str, Any]] = fs.find(prefix, detail=True)  # listed first: see module doc
    with engine.connect() as conn:
        referenced = _referenced(conn, storage, datasource) | {fs._strip_protocol(p) for p in keep}
    candidates: dict[str, int] = {}
    young = 0
    for name, info in sorted(listed.items()):
        path = fs._strip_protocol(name)
        if not path.startswith(prefix) or not _LAYOUT.fullmatch(path[len(prefix):]) or path in referenced:
            continue
        modified = modified_at(info)
        if modified is None or modified >= cutoff:
            young += 1
            continue
        candidates[path] = int(info.get("size") or 0)
    def url(path: str) -> str:  # as segment rows name files: under the root, with its protocol
        return f"{storage.root}/{datasource}/{path[len(prefix):]}"

    if dry_run:
        return [url(p) for p in candidates], young, sum(candidates.values())
    orphans: list[str] = []
    paths = list(candidates)
    for start in range(0, len(paths), _ORPHAN_BATCH):
        with engine.begin() as conn:
            lock_offsets_row(conn, datasource, None)  # publishes of this datasource wait meanwhile
            batch = [p for p in paths[start:start + _ORPHAN_BATCH] if p not in _referenced(conn, storage, datasource)]
            _delete_files(storage, batch)
        orphans += batch
    return [url(p) for p in orphans], young, sum(candidates[p] for p in orphans)


def cleanup(engine: sa.Engine, storage: DeepStorage, datasource: str | None = None, *,
            retention: timedelta = timedelta(days=1), orphan_grace: timedelta = timedelta(days=1),
            replaced_retention: timedelta | None = None, now: datetime | None = None,
            keep: Collection[str] = frozenset(), dry_run: bool = False) -> CleanupReport:
    """Delete unused segments older than ``retention`` and orphan files older than ``orphan_grace``.

    Segments a higher version of their interval replaced go after ``replaced_retention`` (default:
    ``retention``). ``datasource`` None sweeps every datasource the metadata store knows and every
    directory at the deep storage root. Raises only on infrastructure faults.
    """
    replaced_retention = retention if replaced_retention is None else replaced_retention
    if min(retention, orphan_grace, replaced_retention) < timedelta(0):
        raise ValueError(f"expected non-negative retentions and grace, found {retention}, {replaced_retention} "
                         f"and {orphan_grace}")
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("now must be UTC-aware")
    names = [datasource] if datasource is not None else _known_datasources(engine, storage)
    unused: list[str] = []
    orphans: list[str] = []
    young = size = 0
    for name in names:
        ids, freed = _sweep_unused(engine, storage, name, now - retention, now - replaced_retention, keep, dry_run)
        found, kept, orphan_bytes = _sweep_orphans(engine, storage, name, now - orphan_grace, keep, dry_run)
        unused += ids
        orphans += found
        young += kept
        size += freed + orphan_bytes
        if ids or found:
            logger.info("cleanup%s: datasource=%s unused segments=%d orphan files=%d young orphans kept=%d",
                        " (dry run)" if dry_run else "", name, len(ids), len(found), kept)
    return CleanupReport(tuple(names), tuple(unused), tuple(orphans), young, size, dry_run)
