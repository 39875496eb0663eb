"""The schema of release 0.1.0, which created its tables without Alembic.

Tables that exist already are left as they are: a 0.1.0 store is upgraded in place.
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None

_NOW = sa.text("now()")
_EMPTY_JSON = sa.text("'{}'::jsonb")


def _tables() -> dict[str, tuple[sa.schema.SchemaItem, ...]]:
    timestamp = sa.DateTime(timezone=True)
    return {
        "segments": (
            sa.Column("id", sa.Text, primary_key=True),
            sa.Column("datasource", sa.Text, nullable=False),
            sa.Column("interval_start", timestamp, nullable=False),
            sa.Column("interval_end", timestamp, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("partition_num", sa.Integer, nullable=False),
            sa.Column("path", sa.Text, nullable=False),
            sa.Column("size_bytes", sa.BigInteger, nullable=False),
            sa.Column("num_rows", sa.BigInteger, nullable=False),
            sa.Column("used", sa.Boolean, nullable=False),
            sa.Column("created_at", timestamp, nullable=False, server_default=_NOW),
            sa.Column("descriptor", JSONB, nullable=False, server_default=_EMPTY_JSON),
            sa.Column("used_status_updated_at", timestamp, nullable=True),
            sa.UniqueConstraint("datasource", "interval_start", "interval_end", "version", "partition_num",
                                name="segments_interval_version_partition_key"),
            sa.Index("segments_datasource_used_start_idx", "datasource", "used", "interval_start"),
        ),
        "datasource_offsets": (
            sa.Column("datasource", sa.Text, primary_key=True),
            sa.Column("topic", sa.Text, nullable=True),
            sa.Column("offsets", JSONB, nullable=False, server_default=_EMPTY_JSON),
            sa.Column("version", sa.BigInteger, nullable=False, server_default=sa.text("0")),
            sa.Column("epoch", sa.BigInteger, nullable=False, server_default=sa.text("0")),
            sa.Column("updated_at", timestamp, nullable=False, server_default=_NOW),
        ),
        "partition_topic_ids": (
            sa.Column("datasource", sa.Text, primary_key=True),
            sa.Column("partition", sa.Text, primary_key=True),
            sa.Column("topic_id", sa.Text, nullable=False),
            sa.Column("recorded_at", timestamp, nullable=False, server_default=_NOW),
        ),
        "leadership": (
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("epoch", sa.BigInteger, nullable=False),
            sa.Column("leader", sa.Text, nullable=False),
            sa.Column("elected_at", timestamp, nullable=False, server_default=_NOW),
        ),
        "supervisor_specs": (
            sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
            sa.Column("id", sa.Text, nullable=False, index=True),
            sa.Column("spec", JSONB, nullable=False),
            sa.Column("suspended", sa.Boolean, nullable=False, server_default=sa.false()),
            sa.Column("terminated", sa.Boolean, nullable=False, server_default=sa.false()),
            sa.Column("created_at", timestamp, nullable=False, server_default=_NOW),
        ),
        "tasks": (
            sa.Column("id", sa.Text, primary_key=True),
            sa.Column("type", sa.Text, nullable=False, server_default="index_kafka"),
            sa.Column("supervisor_id", sa.Text, nullable=False),
            sa.Column("datasource", sa.Text, nullable=False, index=True),
            sa.Column("status", sa.Text, nullable=False),
            sa.Column("status_detail", sa.Text, nullable=True),
            sa.Column("start_offsets", JSONB, nullable=False),
            sa.Column("end_offsets", JSONB, nullable=False),
            sa.Column("report", JSONB, nullable=True),
            sa.Column("created_at", timestamp, nullable=False, server_default=_NOW),
            sa.Column("finished_at", timestamp, nullable=True),
        ),
        "compaction_configs": (
            sa.Column("datasource", sa.Text, primary_key=True),
            sa.Column("config", JSONB, nullable=False),
            sa.Column("updated_at", timestamp, nullable=False, server_default=_NOW),
        ),
        "retention_rules": (
            sa.Column("datasource", sa.Text, primary_key=True),
            sa.Column("rules", JSONB, nullable=False),
            sa.Column("updated_at", timestamp, nullable=False, server_default=_NOW),
        ),
    }


def upgrade() -> None:
    """Create the tables a 0.1.0 store lacks (all of them in a new one)."""
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    for name, items in _tables().items():
        if name not in existing:
            op.create_table(name, *items)
