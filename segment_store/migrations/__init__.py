"""Alembic migrations of the metadata store's tables, run by :func:`segment_store.migrate.upgrade_schema`."""
