"""The overlord's own records in PostgreSQL: supervisor spec history, tasks and the audit log.

Specs are append-only: every create, update, suspend, resume and terminate adds a row, and
the newest row of an id is its current state (a terminate row is a tombstone). Tasks are
one row each, written at launch and updated when they finish (written behind, in batches:
:mod:`overlord.supervisor.task_rows`). The audit log has a row per change
made through the API (see :mod:`overlord.http.audit`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert

from overlord.supervisor.task_rows import TaskRows
from segment_store import Offsets, Partition
from specs import SpecError, SupervisorSpec, load_supervisor_spec

__all__ = ["SupervisorRecord", "TaskRecord", "MetadataStore"]

logger = logging.getLogger(__name__)

metadata = sa.MetaData()

supervisor_specs = sa.Table(
    "supervisor_specs", metadata,
    sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("id", sa.Text, nullable=False, index=True),
    sa.Column("spec", JSONB, nullable=False),
    sa.Column("suspended", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("terminated", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Column("author", sa.Text, nullable=True),  # who stored it (NULL: before release 0.2, or not via the API)
)

audit_log = sa.Table(
    "audit_log", metadata,
    sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Column("author", sa.Text, nullable=False),
    sa.Column("remote_address", sa.Text, nullable=True),
    sa.Column("method", sa.Text, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("comment", sa.Text, nullable=True),  # Druid's X-Druid-Comment header
)

tasks = sa.Table(
    "tasks", metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("type", sa.Text, nullable=False, server_default="index_kafka"),  # index_kafka | compact
    sa.Column("supervisor_id", sa.Text, nullable=False),
    sa.Column("datasource", sa.Text, nullable=False, index=True),
    sa.Column("status", sa.Text, nullable=False),  # RUNNING | SUCCESS | FAILED
    sa.Column("status_detail", sa.Text, nullable=True),
    sa.Column("start_offsets", JSONB, nullable=False),
    sa.Column("end_offsets", JSONB, nullable=False),
    sa.Column("report", JSONB, nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("log", sa.Text, nullable=True),  # the lines the overlord wrote while it ran (see task_logs)
    sa.Index("tasks_created_at_idx", "created_at"),  # newest first: the task list and its pages
)

compaction_configs = sa.Table(
    "compaction_configs", metadata,
    sa.Column("datasource", sa.Text, primary_key=True),
    sa.Column("config", JSONB, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

retention_rules = sa.Table(
    "retention_rules", metadata,
    sa.Column("datasource", sa.Text, primary_key=True),  # "_default": the cluster's default rules
    sa.Column("rules", JSONB, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)


@dataclass(frozen=True)
class SupervisorRecord:
    """One row of a supervisor's history."""

    seq: int
    id: str
    spec: Mapping[str, Any]
    suspended: bool
    terminated: bool
    created_at: datetime
    author: str | None = None


@dataclass(frozen=True)
class TaskRecord:
    """One task row: an indexing task (with its offset range) or a compaction (empty offsets)."""

    id: str
    type: str
    supervisor_id: str
    datasource: str
    status: str
    status_detail: str | None
    start_offsets: Offsets
    end_offsets: Offsets
    report: Mapping[str, Any] | None
    created_at: datetime
    finished_at: datetime | None


_TASK_COLUMNS = [column for column in tasks.c if column.name != "log"]
"""A task row without its log, which only ``task_log`` reads."""


def _task(row: Any) -> TaskRecord:
    return TaskRecord(row.id, row.type, row.supervisor_id, row.datasource, row.status, row.status_detail,
                      Offsets.from_json(row.start_offsets), Offsets.from_json(row.end_offsets), row.report,
                      row.created_at, row.finished_at)


class MetadataStore:
    """Reads and writes supervisor history and task rows."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.task_rows = TaskRows(engine, tasks)
        """Indexing tasks' rows, written behind (:mod:`overlord.supervisor.task_rows`); readers flush first."""

    def append_spec(self, supervisor_id: str, spec: Mapping[str, Any], *, suspended: bool = False,
                    terminated: bool = False, author: str | None = None) -> SupervisorRecord:
        with self.engine.begin() as conn:
            row = conn.execute(supervisor_specs.insert().values(
                id=supervisor_id, spec=dict(spec), suspended=suspended, terminated=terminated, author=author,
            ).returning(*supervisor_specs.c)).one()
        return SupervisorRecord(**row._mapping)

    def record_change(self, author: str, remote_address: str | None, method: str, path: str, status: int,
                      comment: str | None) -> None:
        """Add a row to the audit log."""
        with self.engine.begin() as conn:
            conn.execute(audit_log.insert().values(author=author, remote_address=remote_address, method=method,
                                                   path=path, status=status, comment=comment))

    def changes(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` rows of the audit log, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(audit_log.select().order_by(audit_log.c.seq.desc()).limit(limit)).mappings()
            return [dict(row) for row in rows]

    def history(self, supervisor_id: str | None = None) -> list[SupervisorRecord]:
        query = supervisor_specs.select().order_by(supervisor_specs.c.seq.desc())
        if supervisor_id is not None:
            query = query.where(supervisor_specs.c.id == supervisor_id)
        with self.engine.connect() as conn:
            return [SupervisorRecord(**row._mapping) for row in conn.execute(query)]

    def datasource_history(self, datasource: str) -> list[SupervisorSpec]:
        """Each distinct spec ever stored for ``datasource`` (under any supervisor id), newest first.

        Specs that no longer load (an older version accepted what is refused now) are left out, with a warning.
        """
        spec = supervisor_specs.c.spec
        query = (sa.select(spec).where(spec["spec"]["dataSchema"]["dataSource"].astext == datasource)
                 .group_by(spec).order_by(sa.func.max(supervisor_specs.c.seq).desc()))
        with self.engine.connect() as conn:
            raws = [dict(row.spec) for row in conn.execute(query)]
        history = []
        for raw in raws:
            try:
                history.append(load_supervisor_spec(raw))
            except SpecError as exc:
                logger.warning("an earlier spec of %s no longer loads and is not compared: %s", datasource, exc)
        return history

    def set_compaction_config(self, datasource: str, config: Mapping[str, Any]) -> None:
        stmt = pg_insert(compaction_configs).values(datasource=datasource, config=dict(config))
        with self.engine.begin() as conn:
            conn.execute(stmt.on_conflict_do_update(index_elements=[compaction_configs.c.datasource], set_={
                "config": stmt.excluded.config, "updated_at": sa.func.now()}))

    def compaction_configs(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(c) for c in conn.execute(sa.select(compaction_configs.c.config).order_by(
                compaction_configs.c.datasource)).scalars()]

    def delete_compaction_config(self, datasource: str) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(compaction_configs.delete().where(
                compaction_configs.c.datasource == datasource)).rowcount)

    def set_rules(self, datasource: str, rules: list[Mapping[str, Any]]) -> None:
        stmt = pg_insert(retention_rules).values(datasource=datasource, rules=[dict(r) for r in rules])
        with self.engine.begin() as conn:
            conn.execute(stmt.on_conflict_do_update(index_elements=[retention_rules.c.datasource], set_={
                "rules": stmt.excluded.rules, "updated_at": sa.func.now()}))

    def rules(self) -> dict[str, list[dict[str, Any]]]:
        """Every datasource's stored retention rules (Druid's JSON), by datasource."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(retention_rules).order_by(retention_rules.c.datasource))
            return {row.datasource: list(row.rules) for row in rows}

    def current_specs(self) -> list[SupervisorRecord]:
        """The newest row of every supervisor id, terminated ones included."""
        newest = sa.select(sa.func.max(supervisor_specs.c.seq)).group_by(supervisor_specs.c.id)
        query = supervisor_specs.select().where(supervisor_specs.c.seq.in_(newest)).order_by(supervisor_specs.c.id)
        with self.engine.connect() as conn:
            return [SupervisorRecord(**row._mapping) for row in conn.execute(query)]

    def insert_task(self, task_id: str, supervisor_id: str, datasource: str, start_offsets: Mapping[Partition, int],
                    end_offsets: Mapping[Partition, int], task_type: str = "index_kafka") -> None:
        self.task_rows.insert({
            "id": task_id, "type": task_type, "supervisor_id": supervisor_id, "datasource": datasource,
            "status": "RUNNING", "start_offsets": Offsets(start_offsets).to_json(),
            "end_offsets": Offsets(end_offsets).to_json()})

    def finish_task(self, task_id: str, status: str, detail: str | None, report: Mapping[str, Any] | None,
                    log: str | None = None, end_offsets: Mapping[Partition, int] | None = None) -> None:
        """Book a task's end; ``end_offsets``: where it read to, if not the end planned at launch."""
        values = {"status": status, "status_detail": detail, "report": dict(report) if report else None, "log": log}
        if end_offsets is not None:
            values["end_offsets"] = Offsets(end_offsets).to_json()
        self.task_rows.update(task_id, values)

    def task_log(self, task_id: str) -> str | None:
        """A finished task's log (None if it has none, or there is no such task)."""
        self.task_rows.flush()
        with self.engine.connect() as conn:
            return conn.execute(sa.select(tasks.c.log).where(tasks.c.id == task_id)).scalar()

    def record_reset(self, supervisor_id: str, datasource: str, before: Mapping[Partition, int],
                     after: Mapping[Partition, int], detail: str) -> None:
        """Keep a finished ``reset_offsets`` row: which offsets a reset moved, from where to where, and why."""
        with self.engine.begin() as conn:
            conn.execute(tasks.insert().values(
                id=f"reset_offsets_{datasource}_{uuid.uuid4().hex[:12]}", type="reset_offsets",
                supervisor_id=supervisor_id, datasource=datasource, status="SUCCESS", status_detail=detail,
                start_offsets=Offsets(before).to_json(), end_offsets=Offsets(after).to_json(),
                finished_at=sa.func.now()))

    def delete_finished_tasks(self, created_before: datetime, batch: int = 10_000) -> int:
        """Delete finished tasks created before ``created_before`` (not ``reset_offsets`` rows); how many.

        A batch per transaction: a large backlog holds no long lock.
        """
        self.task_rows.flush()
        old = sa.select(tasks.c.id).where(tasks.c.created_at < created_before, tasks.c.type != "reset_offsets",
                                          tasks.c.status.in_(("SUCCESS", "FAILED"))).limit(batch)
        deleted = 0
        while True:
            with self.engine.begin() as conn:
                count = conn.execute(tasks.delete().where(tasks.c.id.in_(old.scalar_subquery()))).rowcount
            deleted += count
            if count < batch:
                return deleted

    def fail_running_tasks(self, detail: str) -> int:
        """Mark tasks left RUNNING by a previous overlord process as FAILED (they never published)."""
        self.task_rows.flush()
        with self.engine.begin() as conn:
            result = conn.execute(tasks.update().where(tasks.c.status == "RUNNING").values(
                status="FAILED", status_detail=detail, finished_at=sa.func.now()))
            return int(result.rowcount)

    def tasks(self, *, status: str | None = None, datasource: str | None = None, task_type: str | None = None,
              since: datetime | None = None, limit: int = 200, offset: int = 0) -> list[TaskRecord]:
        """Tasks newest first, filtered; ``offset`` skips that many (a page of the list)."""
        self.task_rows.flush()
        query = sa.select(*_TASK_COLUMNS).order_by(tasks.c.created_at.desc(), tasks.c.id).limit(limit).offset(offset)
        if since is not None:
            query = query.where(tasks.c.created_at >= since)
        if task_type is not None:
            query = query.where(tasks.c.type == task_type)
        if status is not None:
            query = query.where(tasks.c.status == status.upper())
        if datasource is not None:
            query = query.where(tasks.c.datasource == datasource)
        with self.engine.connect() as conn:
            return [_task(row) for row in conn.execute(query)]

    def task(self, task_id: str) -> TaskRecord | None:
        self.task_rows.flush()
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(*_TASK_COLUMNS).where(tasks.c.id == task_id)).one_or_none()
        return _task(row) if row is not None else None
