"""The leader's Iceberg duty: a snapshot of every datasource whose visible segments changed, old ones expired.

See :mod:`segment_store.open_tables` for what a snapshot holds.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from functools import cached_property

import sqlalchemy as sa
from pyiceberg.catalog.sql import SqlCatalog

from overlord.config import Settings
from segment_store import DeepStorage, datasources
from segment_store.open_tables import ExportOutcome, expire, export, exported, open_catalog, protected_files

__all__ = ["TableExport"]

logger = logging.getLogger(__name__)


class TableExport:
    """Iceberg tables in step with the timeline (off when ``iceberg_period_s`` is 0)."""

    def __init__(self, settings: Settings, engine: sa.Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.storage = DeepStorage(settings.deep_storage)

    @cached_property
    def catalog(self) -> SqlCatalog:
        return open_catalog(self.settings.database_url, self.storage)

    def run(self, now: datetime | None = None) -> list[ExportOutcome]:
        """One run: export each datasource (one failing does not stop the others), then expire old snapshots."""
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=self.settings.iceberg_snapshot_retention_s)
        outcomes = []
        for datasource in sorted(set(datasources(self.engine)) | set(exported(self.catalog))):
            try:
                if (outcome := export(self.engine, self.catalog, self.storage, datasource)) is not None:
                    outcomes.append(outcome)
                expire(self.catalog, self.storage, datasource, cutoff)
            except Exception:  # a schema Iceberg cannot hold, the store unreachable: the next run tries again
                logger.exception("iceberg export of %s failed", datasource)
        return outcomes

    def protected(self) -> set[str]:
        """The files cleanup must keep for live snapshots (the export may be off now, its tables live on)."""
        return protected_files(self.catalog, self.storage)
