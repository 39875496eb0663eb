"""The metadata tables: published segments and each datasource's committed offsets.

Their DDL is in the migrations (``segment_store/migrations``), brought to their head by
:func:`segment_store.migrate.upgrade_schema`; a test checks that these declarations match it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

__all__ = ["datasource_offsets", "leadership", "metadata", "partition_topic_ids", "segments"]

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
    sa.Column("used_status_updated_at", sa.DateTime(timezone=True), nullable=True),
    sa.UniqueConstraint("datasource", "interval_start", "interval_end", "version", "partition_num",
                        name="segments_interval_version_partition_key"),
    sa.Index("segments_datasource_used_start_idx", "datasource", "used", "interval_start"),
)
"""One row per segment file. Queries read only ``used`` rows; ``descriptor`` holds the
writer's details plus who published the segment and from which offset range;
``used_status_updated_at`` is when ``used`` last changed (NULL for rows used since they were
published): cleanup's retention of unused segments counts from it."""

datasource_offsets = sa.Table(
    "datasource_offsets",
    metadata,
    sa.Column("datasource", sa.Text, primary_key=True),
    sa.Column("topic", sa.Text, nullable=True),
    sa.Column("offsets", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("epoch", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)
"""Committed offsets per datasource: ``offsets`` maps partition (as a string) to the next
record to read (:class:`segment_store.offsets.Offsets` is its encoding); ``version`` counts
the row's writes; ``epoch`` counts resets: a task carries the epoch it was planned under and
cannot publish under another. ``topic`` is NULL only after a reset, before any publish or pin."""

partition_topic_ids = sa.Table(
    "partition_topic_ids",
    metadata,
    sa.Column("datasource", sa.Text, primary_key=True),
    sa.Column("partition", sa.Text, primary_key=True),
    sa.Column("topic_id", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)
"""The broker's topic ID (KIP-516) of the topic each committed partition was read from (``partition`` in
the offsets' text form): a topic deleted and re-created under the same name has a new ID. Recorded on
first sight, forgotten when the partition's offsets are reset (see :mod:`segment_store.topic_ids`)."""

leadership = sa.Table(
    "leadership",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # one row: id 1
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("leader", sa.Text, nullable=False),
    sa.Column("elected_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)
"""The overlord leader's fencing token: ``epoch`` grows with every election (see segment_store.leadership)."""
