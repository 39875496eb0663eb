"""The leader's Iceberg duty: a snapshot of every datasource whose visible segments changed, old ones expired.

See :mod:`segment_store.open_tables` for what a snapshot holds.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from functools import cached_property

import sqlalchemy as sa

from overlord.config import Settings
from segment_store import DeepStorage, datasources
from segment_store.open_tables import ExportOutcome, OpenTables

__all__ = ["TableExport"]

logger = logging.getLogger(__name__)

EXPIRY_EVERY = timedelta(minutes=1)
"""How often a run also expires old snapshots (each costs a table load per datasource)."""


class TableExport:
    """Iceberg tables in step with the timeline (off when ``iceberg_period_s`` is 0)."""

    def __init__(self, settings: Settings, engine: sa.Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.storage = DeepStorage(settings.deep_storage)
        self._expired_at: datetime | None = None
        self._failing: dict[str, str] = {}
        """Datasource -> the error its export last failed with (logged once, not every run)."""

    @cached_property
    def open_tables(self) -> OpenTables:
        return OpenTables(self.settings.database_url, self.storage)

    def run(self, now: datetime | None = None) -> list[ExportOutcome]:
        """One run: export each datasource (one failing does not stop the others), once a minute expire snapshots."""
        now = now or datetime.now(UTC)
        cutoff = now - timedelta(seconds=self.settings.iceberg_snapshot_retention_s)
        expiring = self._expired_at is None or now - self._expired_at >= EXPIRY_EVERY
        if expiring:
            self._expired_at = now
        outcomes = []
        for datasource in sorted(set(datasources(self.engine)) | set(self.open_tables.exported())):
            try:
                if (outcome := self.open_tables.export(self.engine, datasource)) is not None:
                    outcomes.append(outcome)
                if expiring:
                    self.open_tables.expire(datasource, cutoff)
            except Exception as exc:  # a type Iceberg cannot widen, the store unreachable: the next run tries again
                if self._failing.get(datasource) != (error := f"{type(exc).__name__}: {exc}"):
                    logger.exception("iceberg export of %s failed (logged again when the error changes)", datasource)
                self._failing[datasource] = error
            else:
                if self._failing.pop(datasource, None) is not None:
                    logger.info("iceberg export of %s works again", datasource)
        return outcomes

    def protected(self) -> set[str]:
        """The files cleanup must keep for live snapshots (the export may be off now, its tables live on)."""
        return self.open_tables.protected()
