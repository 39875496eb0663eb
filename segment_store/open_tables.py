"""Open tables: every datasource is also an Apache Iceberg table, built from the timeline.

The PostgreSQL timeline stays the truth. :meth:`OpenTables.export` reads it once (the visible segments
and the committed offsets, in one REPEATABLE READ transaction) and commits an Iceberg snapshot
holding exactly those files: the Parquet files tasks and compaction already wrote, added as
they are (columns found by name mapping), and no others. So every published record is in
exactly one data file of every snapshot, and the snapshot's summary says which Kafka offsets
it covers (``kafka.topic``, ``kafka.offsets``: partition -> next offset).

The catalog is pyiceberg's SQL catalog in the metadata PostgreSQL (the ``iceberg_tables``
layout of Iceberg's JDBC catalog), catalog ``overlord``, namespace ``druid``; a table's
metadata lives under ``{deep storage}/{datasource}/metadata/``. A file a live snapshot
references is never deleted: cleanup keeps :meth:`OpenTables.protected`, and
:meth:`OpenTables.expire` drops old snapshots and the metadata files no live snapshot needs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io.pyarrow import (
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import DayTransform, HourTransform, MonthTransform, Transform, YearTransform
from pyiceberg.types import TimestamptzType
from pyiceberg.utils.datetime import datetime_to_micros

from segment_store.deep_storage import DeepStorage, modified_at
from segment_store.records import SegmentRecord, read_committed
from segment_store.timeline import read_segments, visible

__all__ = ["CATALOG", "NAMESPACE", "OFFSETS_KEY", "TOPIC_KEY", "ExportOutcome", "OpenTables", "open_catalog"]

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
_TRANSFORMS: tuple[Transform[object, int], ...] = (HourTransform(), DayTransform(), MonthTransform(), YearTransform())


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


def _files(table: Table) -> dict[str, DataFile]:
    """Data files of the current snapshot, by path."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    return {entry.data_file.file_path: entry.data_file for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}


def _one_period(transform: Transform[object, int], start: datetime, end: datetime) -> bool:
    """Whether ``[start, end)`` is exactly one period of ``transform`` (Iceberg's are UTC-aligned, as intervals are)."""
    bucket = transform.transform(TimestamptzType())
    first, last = datetime_to_micros(start), datetime_to_micros(end) - 1
    return bucket(first) == bucket(last) and bucket(first - 1) != bucket(first) and bucket(last + 1) != bucket(last)


def _time_transform(records: Iterable[SegmentRecord]) -> Transform[object, int] | None:
    """The hour, day, month or year of ``__time`` when every interval is one such period, else None (unpartitioned)."""
    intervals = {(r.interval_start, r.interval_end) for r in records}
    return next((t for t in _TRANSFORMS if all(_one_period(t, start, end) for start, end in intervals)), None)


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
    after = tx.table_metadata
    if after.schema() != before or after.name_mapping() is None:
        mapping = after.schema().name_mapping.model_dump_json()
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})


def _drop_partitioning(tx: Transaction) -> None:
    """Files no longer fit one partition (the segment granularity changed): the table goes unpartitioned."""
    with tx.update_spec() as update:
        for field in tx.table_metadata.spec().fields:
            update.remove_field(field.name)


NewFiles = dict[str, tuple[int, pq.FileMetaData]]
"""A commit's added files: URI -> (size in bytes, Parquet footer), each footer read once."""


def _commit(table: Table, added: NewFiles, removed: list[DataFile], new_schemas: Iterable[pa.Schema],
            summary: dict[str, str]) -> None:
    """One snapshot: ``added`` files in, ``removed`` out, the schema widened first by the file schemas not seen yet."""
    with table.transaction() as tx:
        if new_schemas:
            _widen_schema(tx, new_schemas)
        new_files = _data_files(tx, table, added)
        snapshot = tx.update_snapshot(snapshot_properties=summary)
        with (snapshot.overwrite() if removed else snapshot.merge_append()) as producer:
            for data_file in removed:
                producer.delete_data_file(data_file)
            for data_file in new_files:
                producer.append_data_file(data_file)


def _footer(storage: DeepStorage, uri: str) -> pq.FileMetaData:
    with storage.fs.open(_path(storage, uri), "rb") as file:
        return pq.read_metadata(file)


def _data_files(tx: Transaction, table: Table, files: NewFiles) -> list[DataFile]:
    """Iceberg's description of each new file, partitioned as the table is."""
    metadata = tx.table_metadata  # each read applies the pending updates to a deep copy of the whole metadata
    try:
        return _described(metadata, files)
    except ValueError as exc:
        if not metadata.spec().fields or "partition" not in str(exc):
            raise
        logger.warning("iceberg table of %s: files span several partitions (%s); the table goes unpartitioned",
                       table.name()[-1], exc)
        _drop_partitioning(tx)
        return _described(tx.table_metadata, files)


def _described(metadata: TableMetadata, files: NewFiles) -> list[DataFile]:
    """Each file's entry, with column statistics from its footer, as pyiceberg's ``parquet_file_to_data_file`` makes it.

    The schema is checked once per file schema, not once per file (a third of a commit's CPU).
    """
    schema, spec = metadata.schema(), metadata.spec()
    for file_schema in {footer.schema.to_arrow_schema() for _, footer in files.values()}:
        _check_pyarrow_schema_compatible(schema, file_schema, format_version=metadata.format_version)
    plan, columns = compute_statistics_plan(schema, metadata.properties), parquet_path_to_id_mapping(schema)
    described = []
    for uri, (size, footer) in files.items():
        statistics = data_file_statistics_from_parquet_metadata(footer, plan, columns)
        described.append(DataFile.from_args(
            content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET,
            partition=statistics.partition(spec, schema), file_size_in_bytes=size, sort_order_id=None,
            spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
            **statistics.to_serialized_dict()))
    return described


class OpenTables:
    """The Iceberg tables of one metadata store and deep storage: export, expiry, the files snapshots need.

    Remembers the files it last committed per datasource, so an unchanged datasource costs one
    timeline read, and an append reads no manifests unless another writer moved the table.
    """

    def __init__(self, database_url: str, storage: DeepStorage) -> None:
        self.storage = storage
        self.catalog = open_catalog(database_url, storage)
        self._known: dict[str, tuple[str, frozenset[str]]] = {}
        """Datasource -> (metadata location, data file paths) as this object last saw or committed them."""
        self._merged: dict[str, set[pa.Schema]] = {}
        """Datasource -> the file schemas its table's schema holds: widening by them again would change nothing, and
        costs pyiceberg several copies of the whole table metadata (a third of a commit's CPU)."""

    def exported(self) -> list[str]:
        """The datasources that have a table."""
        if (NAMESPACE,) not in self.catalog.list_namespaces():
            return []
        return sorted(name for _, name in self.catalog.list_tables(NAMESPACE))

    def _load(self, datasource: str) -> Table | None:
        try:
            return self.catalog.load_table((NAMESPACE, datasource))
        except NoSuchTableError:
            return None

    def export(self, engine: sa.Engine, datasource: str) -> ExportOutcome | None:
        """Commit a snapshot of the datasource's visible segments if they changed; None if nothing did.

        Appends when files were only added, overwrites when some went (a compaction's swap, a drop).
        """
        with engine.connect().execution_options(isolation_level="REPEATABLE READ") as conn, conn.begin():
            records = visible(read_segments(conn, datasource))
            committed = read_committed(conn, datasource)
        wanted = {_uri(self.storage, r.path) for r in records}
        location, current = self._known.get(datasource, ("", frozenset()))
        if datasource in self._known and wanted == current:
            return None
        table = self._load(datasource)
        if table is None or table.metadata_location != location:  # first sight, or another writer moved (or dropped) it
            current = frozenset(_files(table)) if table is not None else frozenset()
            self._merged.pop(datasource, None)
        added = sorted(wanted - current)
        gone = current - wanted
        if table is not None and not added and not gone:
            self._known[datasource] = (table.metadata_location, current)
            return None
        sizes = {_uri(self.storage, r.path): r.size_bytes for r in records}
        new_files = {uri: (sizes[uri], _footer(self.storage, uri)) for uri in added}
        schemas = {footer.schema.to_arrow_schema() for _, footer in new_files.values()}
        if table is None:
            if not added:
                return None
            first = new_files[added[0]][1].schema.to_arrow_schema()
            table = _create(self.catalog, self.storage, datasource, records, first)
        removed = [f for uri, f in _files(table).items() if uri in gone] if gone else []  # as manifests hold them
        offsets = committed.offsets.to_json() if committed is not None else {}
        topic = (committed.topic or "") if committed is not None else ""
        merged = self._merged.get(datasource, set())
        _commit(table, new_files, removed, schemas - merged, {TOPIC_KEY: topic, OFFSETS_KEY: json.dumps(offsets)})
        self._known[datasource] = (table.metadata_location, frozenset(wanted))
        self._merged[datasource] = merged | schemas
        head = table.current_snapshot()
        assert head is not None and head.summary is not None
        outcome = ExportOutcome(datasource, head.snapshot_id, head.summary.operation.value, len(added), len(removed),
                                offsets)
        (logger.info if removed else logger.debug)("iceberg snapshot %d of %s: %s, %d file(s) added, %d removed",
                                                   outcome.snapshot_id, datasource, outcome.operation, len(added),
                                                   len(removed))
        return outcome

    def live_files(self, datasource: str) -> set[str]:
        """Paths (as segment rows name them) of the files any live snapshot of the datasource references."""
        table = self._load(datasource)
        if table is None:
            return set()
        manifests = {m.manifest_path: m for snapshot in table.snapshots() for m in snapshot.manifests(table.io)}
        return {_path(self.storage, entry.data_file.file_path) for manifest in manifests.values()
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}

    def protected(self) -> set[str]:
        """The files cleanup must keep: those any live snapshot of any table references."""
        return {path for datasource in self.exported() for path in self.live_files(datasource)}

    def expire(self, datasource: str, older_than: datetime) -> int:
        """Expire snapshots taken before ``older_than`` (never the current one); the number expired.

        Then delete the metadata files no live snapshot needs that are older than ``older_than``.
        """
        table = self._load(datasource)
        current = table.current_snapshot() if table is not None else None
        if table is None or current is None:
            return 0
        cutoff_ms = int(older_than.timestamp() * 1000)
        old = [s.snapshot_id for s in table.snapshots()
               if s.timestamp_ms < cutoff_ms and s.snapshot_id != current.snapshot_id]
        if old:  # the sweep runs only then: it reads every live snapshot's manifests
            table.maintenance.expire_snapshots().by_ids(old).commit()
            _sweep_metadata(self.catalog.load_table((NAMESPACE, datasource)), self.storage, older_than)
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
