"""Each task's log, kept with its row once it has finished (``GET /druid/indexer/v1/task/{id}/log``)."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    """Add ``tasks.log`` (NULL for tasks that finished before)."""
    op.add_column("tasks", sa.Column("log", sa.Text, nullable=True))
