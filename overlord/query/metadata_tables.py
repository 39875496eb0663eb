"""Druid's metadata tables, built from the metadata store for the queries that read them.

``INFORMATION_SCHEMA.SCHEMATA``, ``TABLES``, ``COLUMNS`` (with Druid's columns: SQL types, JDBC
type numbers, nullability) and ``ROUTINES`` (the functions a query may call), ``sys.segments``,
``sys.tasks``, ``sys.servers`` (the leading overlord; ``server_segments`` and ``server_properties``
are empty) and ``sys.supervisors`` (whose state is what the store knows: SUSPENDED, UNHEALTHY_TASKS
when its last finished task failed, or RUNNING; the live state is at
``/druid/indexer/v1/supervisor/{id}/status``). What SQLAlchemy's ``druid://`` dialect (Superset)
and pydruid ask to list tables and columns is answered here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from overlord.origins import parse_public_url
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.metadata_store import tasks as tasks_t
from segment_store.records import segment_record
from segment_store.schema import leadership as leadership_t
from segment_store.schema import segments as segments_t
from segment_store.timeline import datasources, visible
from specs.masked import mask_secrets
from specs.sketch_aggregators import Sketch

__all__ = ["SCHEMAS", "build_metadata_table"]

_STRING, _LONG = T.StringType(), T.LongType()

# Druid SQL type and JDBC type number per Spark type of a segment column.
_SQL_TYPES: dict[type[T.DataType], tuple[str, int]] = {
    T.TimestampType: ("TIMESTAMP", 93), T.StringType: ("VARCHAR", 12), T.LongType: ("BIGINT", -5),
    T.IntegerType: ("INTEGER", 4), T.DoubleType: ("DOUBLE", 8), T.FloatType: ("FLOAT", 6),
    T.BooleanType: ("BOOLEAN", 16), T.DateType: ("DATE", 91)}


def _schema(*columns: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(name, kind) for name, kind in columns])


SCHEMAS: dict[str, T.StructType] = {
    "information_schema.schemata": _schema(
        ("CATALOG_NAME", _STRING), ("SCHEMA_NAME", _STRING), ("SCHEMA_OWNER", _STRING),
        ("DEFAULT_CHARACTER_SET_CATALOG", _STRING), ("DEFAULT_CHARACTER_SET_SCHEMA", _STRING),
        ("DEFAULT_CHARACTER_SET_NAME", _STRING), ("SQL_PATH", _STRING)),
    "information_schema.tables": _schema(
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("TABLE_TYPE", _STRING),
        ("IS_JOINABLE", _STRING), ("IS_BROADCAST", _STRING)),
    "information_schema.columns": _schema(
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("COLUMN_NAME", _STRING),
        ("ORDINAL_POSITION", _LONG), ("COLUMN_DEFAULT", _STRING), ("IS_NULLABLE", _STRING), ("DATA_TYPE", _STRING),
        ("CHARACTER_MAXIMUM_LENGTH", _LONG), ("CHARACTER_OCTET_LENGTH", _LONG), ("NUMERIC_PRECISION", _LONG),
        ("NUMERIC_PRECISION_RADIX", _LONG), ("NUMERIC_SCALE", _LONG), ("DATETIME_PRECISION", _LONG),
        ("CHARACTER_SET_NAME", _STRING), ("COLLATION_NAME", _STRING), ("JDBC_TYPE", _LONG)),
    "information_schema.routines": _schema(
        ("ROUTINE_CATALOG", _STRING), ("ROUTINE_SCHEMA", _STRING), ("ROUTINE_NAME", _STRING),
        ("ROUTINE_TYPE", _STRING), ("IS_AGGREGATOR", _STRING), ("SIGNATURES", _STRING)),
    "sys.segments": _schema(
        ("segment_id", _STRING), ("datasource", _STRING), ("start", _STRING), ("end", _STRING), ("size", _LONG),
        ("version", _STRING), ("partition_num", _LONG), ("num_replicas", _LONG), ("num_rows", _LONG),
        ("is_active", _LONG), ("is_published", _LONG), ("is_available", _LONG), ("is_realtime", _LONG),
        ("is_overshadowed", _LONG)),
    "sys.tasks": _schema(
        ("task_id", _STRING), ("group_id", _STRING), ("type", _STRING), ("datasource", _STRING),
        ("created_time", _STRING), ("queue_insertion_time", _STRING), ("status", _STRING),
        ("runner_status", _STRING), ("duration", _LONG), ("location", _STRING), ("host", _STRING),
        ("plaintext_port", _LONG), ("tls_port", _LONG), ("error_msg", _STRING)),
    "sys.supervisors": _schema(
        ("supervisor_id", _STRING), ("state", _STRING), ("detailed_state", _STRING), ("healthy", _LONG),
        ("type", _STRING), ("source", _STRING), ("suspended", _LONG), ("spec", _STRING)),
    "sys.servers": _schema(
        ("server", _STRING), ("host", _STRING), ("plaintext_port", _LONG), ("tls_port", _LONG),
        ("server_type", _STRING), ("tier", _STRING), ("curr_size", _LONG), ("max_size", _LONG),
        ("is_leader", _LONG), ("start_time", _STRING)),
    "sys.server_segments": _schema(("server", _STRING), ("segment_id", _STRING)),
    "sys.server_properties": _schema(
        ("server", _STRING), ("service_name", _STRING), ("node_roles", _STRING), ("property", _STRING),
        ("value", _STRING)),
}
"""Every metadata table's columns, as Druid names them."""


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat().replace("+00:00", "Z") if ts is not None else None


def _rows(table: str, engine: sa.Engine, datasource_schemas: Callable[[], Mapping[str, T.StructType]],
          functions: Mapping[str, bool]) -> list[tuple[Any, ...]]:
    if table == "information_schema.routines":
        return [("druid", "INFORMATION_SCHEMA", name, "FUNCTION", "YES" if aggregate else "NO", None)
                for name, aggregate in sorted(functions.items())]
    if table == "information_schema.schemata":
        return [("druid", schema, None, None, None, None, None) for schema in ("druid", "INFORMATION_SCHEMA", "sys")]
    if table == "information_schema.tables":
        system = [("druid", *_display_name(name), "SYSTEM_TABLE", "NO", "NO") for name in sorted(SCHEMAS)]
        return [("druid", "druid", ds, "TABLE", "NO", "NO") for ds in datasources(engine)] + system
    if table == "information_schema.columns":
        return [("druid", "druid", ds, field.name, position, "", "NO" if field.name == "__time" else "YES",
                 *_types(field.dataType, field.metadata.get("kind")))
                for ds, schema in sorted(datasource_schemas().items())
                for position, field in enumerate(schema.fields)]  # Druid counts from 0
    if table == "sys.segments":
        with engine.connect() as conn:
            segments = [segment_record(r) for r in conn.execute(sa.select(segments_t)).mappings()]
        by_datasource: dict[str, list[Any]] = {}
        for segment in segments:
            by_datasource.setdefault(segment.datasource, []).append(segment)
        shown = {s.id for group in by_datasource.values() for s in visible(group)}  # versions count per datasource
        return [(s.id, s.datasource, _iso(s.interval_start), _iso(s.interval_end), s.size_bytes, str(s.version),
                 s.partition_num, int(s.used), s.num_rows, int(s.id in shown), int(s.used), int(s.used), 0,
                 int(s.used and s.id not in shown)) for s in segments]
    if table == "sys.supervisors":
        return _supervisor_rows(engine)
    if table == "sys.servers":
        return _server_rows(engine)
    if table in ("sys.server_segments", "sys.server_properties"):
        return []  # no historicals hold segments (queries read deep storage); properties are not shown
    with engine.connect() as conn:
        tasks = list(conn.execute(sa.select(tasks_t).order_by(tasks_t.c.created_at.desc())).mappings())
    return [(t["id"], t["supervisor_id"], t["type"], t["datasource"], _iso(t["created_at"]), _iso(t["created_at"]),
             t["status"], "RUNNING" if t["status"] == "RUNNING" else "NONE",
             -1 if t["finished_at"] is None else int((t["finished_at"] - t["created_at"]).total_seconds() * 1000),
             None, None, -1, -1, t["status_detail"] if t["status"] == "FAILED" else None) for t in tasks]


def _supervisor_rows(engine: sa.Engine) -> list[tuple[Any, ...]]:
    last = (sa.select(tasks_t.c.supervisor_id, tasks_t.c.status).where(tasks_t.c.finished_at.is_not(None))
            .distinct(tasks_t.c.supervisor_id).order_by(tasks_t.c.supervisor_id, tasks_t.c.finished_at.desc()))
    with engine.connect() as conn:
        last_failed = {row.supervisor_id: row.status == "FAILED" for row in conn.execute(last)}
    rows = []
    for record in MetadataStore(engine).current_specs():
        if record.terminated:
            continue
        state = "SUSPENDED" if record.suspended else "UNHEALTHY_TASKS" if last_failed.get(record.id) else "RUNNING"
        io = record.spec.get("spec", {}).get("ioConfig", {})
        rows.append((record.id, state, state, int(state != "UNHEALTHY_TASKS"), record.spec.get("type", "kafka"),
                     io.get("topic"), int(record.suspended), json.dumps(mask_secrets(record.spec))))
    return rows


def _server_rows(engine: sa.Engine) -> list[tuple[Any, ...]]:
    """The leading overlord, as Druid lists its servers (the only server with a role Druid has)."""
    with engine.connect() as conn:
        leader = conn.execute(sa.select(leadership_t.c.leader, leadership_t.c.elected_at)
                              .where(leadership_t.c.id == 1)).first()
    if leader is None:
        return []
    name = leader.leader  # its advertised URL (as the settings checked it), or host:pid
    try:
        origin = parse_public_url(name)
    except ValueError:
        return [(name, name.rsplit(":", 1)[0], -1, -1, "overlord", None, 0, 0, 1, _iso(leader.elected_at))]
    plain, tls = (-1, origin.port) if origin.scheme == "https" else (origin.port, -1)
    return [(name, origin.host, plain, tls, "overlord", None, 0, 0, 1, _iso(leader.elected_at))]


def _display_name(table: str) -> tuple[str, str]:
    """(TABLE_SCHEMA, TABLE_NAME) of a metadata table, spelt as Druid spells them."""
    schema, name = table.split(".")
    return ("INFORMATION_SCHEMA", name.upper()) if schema == "information_schema" else (schema, name)


def _complex_type(kind: str | None) -> str | None:
    """Druid's COMPLEX<...> type of a sketch or first/last column of ``kind`` (its descriptor's), if one."""
    if kind is None or kind == "multi_value":
        return None
    if kind.startswith("pair:"):
        return f"COMPLEX<serializablePairLong{kind[5:].capitalize()}>"
    sketch = Sketch.parse(kind)
    if sketch.family == "hll":
        return "COMPLEX<hyperUnique>" if sketch.counts_empty else "COMPLEX<HLLSketch>"
    return "COMPLEX<thetaSketch>" if sketch.family == "theta" else "COMPLEX<quantilesDoublesSketch>"


def _types(kind: T.DataType, complex_kind: str | None = None) -> tuple[Any, ...]:
    """DATA_TYPE and the columns after it up to JDBC_TYPE (``complex_kind``: a sketch or pair column's)."""
    multi_value = isinstance(kind, T.ArrayType) and isinstance(kind.elementType, T.StringType)
    name, jdbc = ("VARCHAR", 12) if multi_value else _SQL_TYPES.get(type(kind), ("OTHER", 1111))  # as Druid types it
    name = _complex_type(complex_kind) or name
    numeric = name in ("BIGINT", "INTEGER", "DOUBLE", "FLOAT")
    return (name, None, None, 19 if name == "BIGINT" else (15 if numeric else None), 10 if numeric else None,
            0 if name in ("BIGINT", "INTEGER") else None, 3 if name == "TIMESTAMP" else None,
            "UTF-16LE" if name == "VARCHAR" else None, "UTF-16LE$en_US$primary" if name == "VARCHAR" else None, jdbc)


def build_metadata_table(session: SparkSession, table: str, engine: sa.Engine,
                         datasource_schemas: Callable[[], Mapping[str, T.StructType]],
                         functions: Mapping[str, bool]) -> DataFrame:
    """The rows of metadata table ``table`` (``schema.table``, lower case) as of now.

    ``functions``: every function a query may call (upper case), and whether it is an aggregate (ROUTINES).
    """
    return session.createDataFrame(_rows(table, engine, datasource_schemas, functions), SCHEMAS[table])
