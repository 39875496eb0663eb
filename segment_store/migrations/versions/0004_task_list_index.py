"""An index for the task list, newest first: the console asks for a page of it every 2 s."""

from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    """Index ``tasks.created_at`` (without it every page sorted the whole table)."""
    op.create_index("tasks_created_at_idx", "tasks", ["created_at"])
