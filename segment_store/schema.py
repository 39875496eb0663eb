"""The metadata tables: published segments and each datasource's committed offsets.

``create_schema`` is idempotent and safe to run from several processes at once: it creates
the missing tables and columns under a transaction-scoped advisory lock.
"""

from __future__ import annotations

import zlib

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

__all__ = ["create_schema", "datasource_offsets", "metadata", "segment_status", "segments"]

metadata = sa.MetaData()

segments = sa.Table(
    "segments",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("datasource", sa.Text, nullable=False),
    sa.Column("interval_start", sa.DateTime(timezone=True), nullable=False),
    sa.Column("interval_end", sa.DateTime(timezone=True), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("partition_num", sa.Integer, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("num_rows", sa.BigInteger, nullable=False),
    sa.Column("used", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Column("descriptor", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.UniqueConstraint("datasource", "interval_start", "interval_end", "version", "partition_num",
                        name="segments_interval_version_partition_key"),
    sa.Index("segments_datasource_used_start_idx", "datasource", "used", "interval_start"),
)
"""One row per segment file. Queries read only ``used`` rows; ``descriptor`` holds the
writer's details plus who published the segment and from which offset range."""

datasource_offsets = sa.Table(
    "datasource_offsets",
    metadata,
    sa.Column("datasource", sa.Text, primary_key=True),
    sa.Column("topic", sa.Text, nullable=True),
    sa.Column("offsets", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)
"""Committed offsets per datasource: ``offsets`` maps partition (as a string) to the next
record to read; ``version`` is the compare-and-swap token, bumped by every write. ``topic``
is NULL only for a row created by ``reset_offsets`` before any publish."""

segment_status = sa.table(
    "segments",
    sa.column("id", sa.Text),
    sa.column("datasource", sa.Text),
    sa.column("path", sa.Text),
    sa.column("size_bytes", sa.BigInteger),
    sa.column("used", sa.Boolean),
    sa.column("used_status_updated_at", sa.DateTime(timezone=True)),
)
"""``segments.used_status_updated_at``: when the row's ``used`` flag last changed (NULL for rows
that are used and never changed). Cleanup's retention of unused segments counts from it.

The column is added by :func:`create_schema` (``ALTER TABLE``) rather than declared in
``segments`` above, so that ``select(segments)`` keeps returning exactly the fields of
``SegmentRecord``; statements that need the column use this lightweight table."""

_SCHEMA_LOCK_KEY = zlib.crc32(b"segment_store.schema")


def _add_used_status_updated_at(conn: sa.Connection) -> None:
    """Add the column once; rows already unused then start their retention period now."""
    found = conn.execute(sa.text(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'segments' AND column_name = 'used_status_updated_at'")).first()
    if found is None:
        conn.execute(sa.text("ALTER TABLE segments ADD COLUMN used_status_updated_at timestamptz"))
        conn.execute(sa.text("UPDATE segments SET used_status_updated_at = now() WHERE NOT used"))


def create_schema(engine: sa.Engine) -> None:
    """Create the tables, columns and indexes that do not exist yet (serialised by an advisory lock)."""
    with engine.begin() as conn:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK_KEY)))
        metadata.create_all(conn, checkfirst=True)
        _add_used_status_updated_at(conn)
