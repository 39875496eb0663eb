"""The metadata store's schema: Alembic migrations (``segment_store/migrations``) brought to their head.

Every overlord and CLI command upgrades the schema before it uses the store, under a
transaction-scoped advisory lock: the first of several processes starting at once migrates, the
others wait for it and find nothing to do. A store newer than this code (a rollback of the
overlord after an upgrade) is refused with a message saying so, rather than written to blindly.
Apache Iceberg's catalog tables are pyiceberg's, which creates them itself.
"""

from __future__ import annotations

import logging
import zlib
from functools import cache

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

__all__ = ["SchemaTooNew", "current_revision", "head_revision", "upgrade_schema"]

logger = logging.getLogger(__name__)

_SCHEMA_LOCK_KEY = zlib.crc32(b"segment_store.schema")
"""Held while the schema is checked and upgraded (release 0.1.0 took it to create its tables)."""


class SchemaTooNew(SystemExit):
    """The store was migrated by a newer release than this one: nothing here should run against it.

    A :class:`SystemExit`, so a command or ``overlord serve`` stops with the message alone (exit code 1).
    """


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", "segment_store:migrations")
    return config


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head_revision() -> str:
    """The newest revision this code knows."""
    head = _scripts().get_current_head()
    assert head is not None
    return head


def current_revision(engine: sa.Engine) -> str | None:
    """The store's revision (None: never migrated, perhaps a 0.1.0 store)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_schema(engine: sa.Engine) -> str | None:
    """Bring the store to :func:`head_revision`; the revision it was at (None if it had none)."""
    head = head_revision()
    with engine.begin() as conn:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK_KEY)))
        before = MigrationContext.configure(conn).get_current_revision()
        if before == head:
            return before
        known = {script.revision for script in _scripts().walk_revisions()}
        if before is not None and before not in known:
            raise SchemaTooNew(f"the metadata store's schema is at revision {before}, which this release does "
                               f"not know (its newest is {head}): it was upgraded by a newer release; run that")
        config = _config()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    logger.info("metadata store schema upgraded from %s to %s", before or "nothing", head)
    return before
