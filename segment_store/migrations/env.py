"""Alembic's environment: migrations run on the connection (and transaction) ``upgrade_schema`` passes in."""

from alembic import context

context.configure(connection=context.config.attributes["connection"])
with context.begin_transaction():
    context.run_migrations()
