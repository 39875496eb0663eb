"""Deep storage for segment files, behind fsspec: a local directory or ``s3://bucket/prefix``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from segment_store.segment_cache import checksum, keep_incoming

__all__ = ["DeepStorage", "WrittenFile", "modified_at", "segment_file_path"]


def _compact(ts: datetime) -> str:
    return ts.strftime("%Y%m%dT%H%M%S") + f".{ts.microsecond // 1000:03d}Z"


def segment_file_path(root: str, datasource: str, interval_start: datetime, interval_end: datetime,
                      attempt_id: str, part: int) -> str:
    """``{root}/{datasource}/{start}_{end}/{attempt_id}/part-{n}.parquet``.

    No version in the path: a segment's version may change without rewriting its file.
    Times are written without colons so the paths stay valid for Hadoop-style readers.
    """
    interval = f"{_compact(interval_start)}_{_compact(interval_end)}"
    return f"{root.rstrip('/')}/{datasource}/{interval}/{attempt_id}/part-{part:05d}.parquet"


class WrittenFile(NamedTuple):
    """A file written to deep storage: its size, and its checksum where one was taken."""

    size_bytes: int
    checksum: str | None = None


class DeepStorage:
    """A root URI and the fsspec filesystem that serves it."""

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None, copy_to: str | None = None) -> None:
        """A root; ``copy_to``: a segment cache's directory on this machine, which gets a copy of each file written."""
        self.copy_to = copy_to
        self.fs: fsspec.AbstractFileSystem
        self.fs, path = url_to_fs(root, **(storage_options or {}))
        self.root = root.rstrip("/")
        self.is_local = self.fs.protocol in ("file", ("file", "local"), "local")
        if self.is_local:
            self.root = path.rstrip("/")

    def path_for(self, datasource: str, interval_start: datetime, interval_end: datetime,
                 attempt_id: str, part: int) -> str:
        return segment_file_path(self.root, datasource, interval_start, interval_end, attempt_id, part)

    def makedirs_for(self, path: str) -> None:
        """Create the parent directory of ``path`` (a no-op on object stores).

        Not delegated to s3fs there: its ``makedirs`` probes the bucket (HeadBucket, which needs
        s3:ListBucket) on every call and, if the probe fails, *creates* the bucket, so a
        misspelt bucket would appear silently and a put-only role would get AccessDenied.
        """
        if self.is_local:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)

    def write_table(self, path: str, table: pa.Table, **options: Any) -> WrittenFile:
        """Write ``table`` as a zstd Parquet file at ``path`` (``options``: pyarrow's ``write_table``).

        On an object store the file is built in memory and put in one request, and its checksum
        recorded (a segment cache verifies its copies by it); no request asks its size afterwards.
        """
        self.makedirs_for(path)
        if self.is_local:
            with self.fs.open(path, "wb") as out:
                pq.write_table(table, out, compression="zstd", **options)
            return WrittenFile(self.size(path))
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression="zstd", **options)
        data = buffer.getvalue().to_pybytes()
        self.fs.pipe_file(path, data)
        if self.copy_to is not None:
            keep_incoming(self.copy_to, path, data)
        return WrittenFile(len(data), checksum(data))

    def size(self, path: str) -> int:
        return int(self.fs.size(path))

    def missing(self, paths: Iterable[str]) -> list[str]:
        """Those of ``paths`` that do not exist, found with one listing per directory, not a request per file.

        A task's files share a few directories of their own (one per interval and attempt), so a
        publish of thousands of segments checks them in a few requests while it holds its lock.
        """
        by_directory: dict[str, list[str]] = {}
        for path in paths:
            by_directory.setdefault(path.rsplit("/", 1)[0], []).append(path)
        gone = []
        for directory, wanted in by_directory.items():
            self.fs.invalidate_cache(directory)
            try:
                present = {name.rsplit("/", 1)[-1] for name in self.fs.ls(directory, detail=False)}
            except FileNotFoundError:
                present = set()
            gone += [path for path in wanted if path.rsplit("/", 1)[-1] not in present]
        return gone


def modified_at(info: Mapping[str, Any]) -> datetime | None:
    """A listed file's modification time (fsspec's ``info``), if the filesystem reports one."""
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return None
