"""Who changed what: the audit log of every change made through the API, and each spec's author."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    """Add ``audit_log`` and ``supervisor_specs.author`` (NULL for specs stored before)."""
    op.add_column("supervisor_specs", sa.Column("author", sa.Text, nullable=True))
    op.create_table(
        "audit_log",
        sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.Column("author", sa.Text, nullable=False),
        sa.Column("remote_address", sa.Text, nullable=True),
        sa.Column("method", sa.Text, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("comment", sa.Text, nullable=True),
    )
