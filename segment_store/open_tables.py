"""Open tables: every datasource is also an Apache Iceberg table, built from the timeline.

The PostgreSQL timeline stays the truth. :func:`export` reads it once (the visible segments
and the committed offsets, in one REPEATABLE READ transaction) and commits an Iceberg snapshot
holding exactly those files: the Parquet files tasks and compaction already wrote, added as
they are (columns found by name mapping), and no others. So every published record is in
exactly one data file of every snapshot, and the snapshot's summary says which Kafka offsets
it covers (``kafka.topic``, ``kafka.offsets``: partition -> next offset).

The catalog is pyiceberg's SQL catalog in the metadata PostgreSQL (the ``iceberg_tables``
layout of Iceberg's JDBC catalog), catalog ``overlord``, namespace ``druid``; a table's
metadata lives under ``{deep storage}/{datasource}/metadata/``. A file a live snapshot
references is never deleted: cleanup keeps :func:`live_data_files`, and :func:`expire`
drops old snapshots and the metadata files no live snapshot needs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.transforms import DayTransform, HourTransform, Transform

from segment_store.deep_storage import DeepStorage, modified_at
from segment_store.records import SegmentRecord, read_committed
from segment_store.timeline import read_segments, visible

__all__ = ["CATALOG", "NAMESPACE", "ExportOutcome", "expire", "export", "exported", "live_data_files", "open_catalog",
           "protected_files"]

logger = logging.getLogger(__name__)

CATALOG = "overlord"
"""The catalog name other engines give the JDBC catalog (its rows are keyed by it)."""
NAMESPACE = "druid"
TOPIC_KEY, OFFSETS_KEY = "kafka.topic", "kafka.offsets"
"""Snapshot summary keys: the topic and the committed offsets (JSON, partition -> next offset) a snapshot covers."""

_TABLE_PROPERTIES = {
    TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true",  # keep the metadata.json files bounded
    TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: "20",
    TableProperties.MANIFEST_MIN_MERGE_COUNT: "16",  # appends merge small manifests
}
_TRANSFORMS: tuple[tuple[timedelta, Transform[object, int]], ...] = (
    (timedelta(hours=1), HourTransform()), (timedelta(days=1), DayTransform()))


@dataclass(frozen=True)
class ExportOutcome:
    """One snapshot committed: its operation, the files added and removed, the offsets it covers."""

    datasource: str
    snapshot_id: int
    operation: str
    added: int
    removed: int
    offsets: dict[str, int]


def open_catalog(database_url: str, storage: DeepStorage) -> SqlCatalog:
    """The SQL catalog in the metadata PostgreSQL (its tables are created if missing)."""
    return SqlCatalog(CATALOG, uri=database_url, warehouse=_uri(storage, storage.root),
                      **{"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"})


def _uri(storage: DeepStorage, path: str) -> str:
    """A path as segment rows name it -> a URI as Iceberg names files (``file://`` for local paths)."""
    return f"file://{path}" if storage.is_local else path


def _path(storage: DeepStorage, uri: str) -> str:
    return uri.removeprefix("file://") if storage.is_local else uri


def exported(catalog: SqlCatalog) -> list[str]:
    """The datasources that have a table."""
    return sorted(name for _, name in catalog.list_tables(NAMESPACE)) if (NAMESPACE,) in catalog.list_namespaces() \
        else []


def _files(table: Table, snapshot_id: int | None = None) -> dict[str, DataFile]:
    """Data files of a snapshot (the current one by default), by path."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return {}
    return {entry.data_file.file_path: entry.data_file for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}


def _time_transform(records: Iterable[SegmentRecord]) -> Transform[object, int] | None:
    """Hour or day of ``__time`` when every interval is one such period, else None (unpartitioned).

    Both align with UTC, as segment granularities do.
    """
    lengths = {r.interval_end - r.interval_start for r in records}
    return next((transform for length, transform in _TRANSFORMS if lengths == {length}), None)


def _create(catalog: SqlCatalog, storage: DeepStorage, datasource: str, records: list[SegmentRecord],
            schema: pa.Schema) -> Table:
    catalog.create_namespace_if_not_exists(NAMESPACE)
    table = catalog.create_table((NAMESPACE, datasource), schema=schema,
                                 location=_uri(storage, f"{storage.root}/{datasource}"), properties=_TABLE_PROPERTIES)
    if (transform := _time_transform(records)) is not None:
        with table.update_spec() as update:
            update.add_field("__time", transform, f"__time_{transform}")
    return catalog.load_table((NAMESPACE, datasource))


def _widen_schema(tx: Transaction, schemas: Iterable[pa.Schema]) -> None:
    """Add the columns new files bring (a spec update) and widen types; keep the name mapping in step."""
    before = tx.table_metadata.schema()
    with tx.update_schema() as update:
        update.union_by_name(pa.unify_schemas(list(schemas), promote_options="permissive"))
    if tx.table_metadata.schema() != before or tx.table_metadata.name_mapping() is None:
        mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})


def _drop_partitioning(tx: Transaction) -> None:
    """Files no longer fit one partition (the segment granularity changed): the table goes unpartitioned."""
    with tx.update_spec() as update:
        for field in tx.table_metadata.spec().fields:
            update.remove_field(field.name)


def export(engine: sa.Engine, catalog: SqlCatalog, storage: DeepStorage, datasource: str) -> ExportOutcome | None:
    """Commit a snapshot of the datasource's visible segments if they changed; None if nothing did.

    Appends when files were only added, overwrites when some went (a compaction's swap, a drop).
    """
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
        records = visible(read_segments(conn, datasource))
        committed = read_committed(conn, datasource)
    wanted = {_uri(storage, r.path): r for r in records}
    try:
        table: Table | None = catalog.load_table((NAMESPACE, datasource))
    except NoSuchTableError:
        table = None
    current = _files(table) if table is not None else {}
    added = [uri for uri in wanted if uri not in current]
    removed = [data_file for uri, data_file in current.items() if uri not in wanted]
    if not added and not removed:
        return None
    schemas = [_file_schema(storage, uri) for uri in added]
    if table is None:
        table = _create(catalog, storage, datasource, records, schemas[0])
    offsets = committed.offsets.to_json() if committed is not None else {}
    summary = {TOPIC_KEY: (committed.topic or "") if committed is not None else "", OFFSETS_KEY: json.dumps(offsets)}
    with table.transaction() as tx:
        if schemas:
            _widen_schema(tx, schemas)
        new_files = _data_files(tx, table, added)
        snapshot = tx.update_snapshot(snapshot_properties=summary)
        with (snapshot.overwrite() if removed else snapshot.merge_append()) as producer:
            for data_file in removed:
                producer.delete_data_file(data_file)
            for data_file in new_files:
                producer.append_data_file(data_file)
    head = catalog.load_table((NAMESPACE, datasource)).current_snapshot()
    assert head is not None
    outcome = ExportOutcome(datasource, head.snapshot_id, head.summary.operation.value if head.summary else "",
                            len(added), len(removed), offsets)
    (logger.info if removed else logger.debug)("iceberg snapshot %d of %s: %s, %d file(s) added, %d removed",
                                               outcome.snapshot_id, datasource, outcome.operation, len(added),
                                               len(removed))
    return outcome


def _file_schema(storage: DeepStorage, uri: str) -> pa.Schema:
    with storage.fs.open(_path(storage, uri), "rb") as file:
        return pq.read_schema(file)


def _data_files(tx: Transaction, table: Table, uris: list[str]) -> list[DataFile]:
    """Iceberg's description of each new file (read from its footer), partitioned as the table is."""
    try:
        return [parquet_file_to_data_file(table.io, tx.table_metadata, uri) for uri in uris]
    except ValueError as exc:
        if not tx.table_metadata.spec().fields or "partition" not in str(exc):
            raise
        logger.warning("iceberg table of %s: files span several partitions (%s); the table goes unpartitioned",
                       table.name()[-1], exc)
        _drop_partitioning(tx)
        return [parquet_file_to_data_file(table.io, tx.table_metadata, uri) for uri in uris]


def live_data_files(catalog: SqlCatalog, storage: DeepStorage, datasource: str) -> set[str]:
    """Paths (as segment rows name them) of the files any live snapshot of the datasource's table references."""
    try:
        table = catalog.load_table((NAMESPACE, datasource))
    except NoSuchTableError:
        return set()
    return {_path(storage, uri) for snapshot in table.snapshots() for uri in _files(table, snapshot.snapshot_id)}


def protected_files(catalog: SqlCatalog, storage: DeepStorage) -> set[str]:
    """The files cleanup must keep: those any live snapshot of any table references."""
    return {path for datasource in exported(catalog) for path in live_data_files(catalog, storage, datasource)}


def expire(catalog: SqlCatalog, storage: DeepStorage, datasource: str, older_than: datetime) -> int:
    """Expire snapshots taken before ``older_than`` (never the current one); the number expired.

    Then delete the metadata files no live snapshot needs that are older than ``older_than``.
    """
    table = catalog.load_table((NAMESPACE, datasource))
    current = table.current_snapshot()
    cutoff_ms = int(older_than.timestamp() * 1000)
    old = [s.snapshot_id for s in table.snapshots()
           if s.timestamp_ms < cutoff_ms and (current is None or s.snapshot_id != current.snapshot_id)]
    if old:  # the sweep runs only then: it reads every live snapshot's manifests
        table.maintenance.expire_snapshots().by_ids(old).commit()
        _sweep_metadata(catalog.load_table((NAMESPACE, datasource)), storage, older_than)
    return len(old)


def _sweep_metadata(table: Table, storage: DeepStorage, older_than: datetime) -> None:
    """Delete files under the table's ``metadata/`` that neither the metadata log nor a live snapshot names."""
    meta = table.metadata
    live = {table.metadata_location, *(entry.metadata_file for entry in meta.metadata_log)}
    for snapshot in table.snapshots():
        live.add(snapshot.manifest_list)
        live.update(m.manifest_path for m in snapshot.manifests(table.io))
    live_paths = {storage.fs._strip_protocol(_path(storage, uri)) for uri in live}
    directory = storage.fs._strip_protocol(_path(storage, f"{meta.location}/metadata"))
    try:
        listed = storage.fs.find(directory, detail=True)
    except FileNotFoundError:
        return
    doomed = [name for name, info in listed.items()
              if storage.fs._strip_protocol(name) not in live_paths
              and (modified_at(info) or older_than) < older_than]
    for name in doomed:
        storage.fs.rm_file(name)
    if doomed:
        logger.info("iceberg table %s: %d unreferenced metadata file(s) deleted", table.name()[-1], len(doomed))
