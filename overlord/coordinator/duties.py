"""The coordinator: Druid's duties over published segments, run by the leading overlord.

Each duty runs once per period of its own (``OVERLORD_*_PERIOD_S``, 0 turns it off), at its own phase
of that period, and only while this overlord leads: auto-compaction, retention, Iceberg export
and kill. The API reaches the same operations by hand (compact, rules, mark used/unused).
Compactions run as tasks of the supervisors' task runner, listed under ``/tasks`` beside them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import sqlalchemy as sa
from apscheduler.schedulers.background import BackgroundScheduler

from indexing_task.compaction_job import CompactionReport, Selection, compact
from indexing_task.published_columns import check_against_segments
from overlord.config import Settings
from overlord.coordinator.auto_compaction import CompactionConfig, default_config, merge_selection
from overlord.coordinator.retention import DEFAULT_RULES, DEFAULT_RULES_KEY, RULES, Rule, dropped
from overlord.coordinator.table_export import TableExport
from overlord.metrics import Metrics
from overlord.overlord_errors import error_summary
from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.task_runner import TaskRunner
from segment_store import CleanupReport, DeepStorage, SegmentRecord, cleanup, datasources, mark_unused, mark_used
from segment_store.open_tables import ExportOutcome
from segment_store.timeline import Interval, visible_by_interval, visible_segments
from specs import SupervisorSpec

__all__ = ["Coordinator", "Supervisors"]

logger = logging.getLogger(__name__)


class Supervisors(Protocol):
    """What the duties need of the supervisors' manager: its store, task runner, leadership and specs."""

    settings: Settings
    engine: sa.Engine
    store: MetadataStore
    runner: TaskRunner
    metrics: Metrics

    @property
    def leading(self) -> bool: ...

    @property
    def supervisors(self) -> Mapping[str, Any]: ...

    def require_leader(self) -> None: ...

    def spec_of(self, datasource: str) -> SupervisorSpec: ...


class Coordinator:
    """The duties over one overlord's datasources. Thread-safe: the API and the duties' schedule call in."""

    def __init__(self, supervisors: Supervisors) -> None:
        """Set up (no duty runs until :meth:`start`; the operations work at once)."""
        self.supervisors = supervisors
        self.settings, self.engine, self.store = supervisors.settings, supervisors.engine, supervisors.store
        self.runner = supervisors.runner
        self.table_export = TableExport(self.settings, self.engine)
        self.scheduler = BackgroundScheduler(timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1})
        self._stopped = False

    @property
    def leading(self) -> bool:
        return self.supervisors.leading

    def start(self) -> None:
        """Schedule the duties whose period is not 0, each at its own phase: their passes never coincide."""
        duties = (("auto-compaction", self.auto_compact, self.settings.compaction_period_s),
                  ("retention", self.apply_retention, self.settings.retention_period_s),
                  ("iceberg", self.export_tables, self.settings.iceberg_period_s),
                  ("kill", self.kill_unused, self.settings.kill_period_s))
        now = datetime.now(UTC)
        for phase, (name, duty, period_s) in enumerate(duties):
            if period_s:
                first = now + timedelta(seconds=period_s * (1 + phase / len(duties)))
                self.scheduler.add_job(self._run_duty, "interval", args=[name, duty], id=name, seconds=period_s,
                                       start_date=first)
        self.scheduler.start()

    def stop(self) -> None:
        """Run no more duties (one running finishes on its own; its tasks stop with the overlord's)."""
        self._stopped = True
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def _run_duty(self, name: str, duty: Callable[[], object]) -> None:
        try:
            duty()
        except Exception as exc:
            if self._stopped:  # a run that overlapped the shutdown met what is already stopped: not a failure
                logger.info("%s run cut short by the overlord's shutdown: %s", name, exc)
            else:  # PostgreSQL unreachable and the like: the next run tries again
                logger.exception("%s run failed", name)

    # --- compaction ------------------------------------------------------------------------

    def compact(self, datasource: str, interval: Interval | None = None, max_rows_per_segment: int | None = None,
                select: Selection | None = None) -> tuple[str, Future[list[CompactionReport]]]:
        """Compact a datasource's intervals as a task: listed under /tasks, stoppable, stopped at shutdown.

        Uses the datasource's current (or last, if terminated) supervisor spec to merge rows;
        ``select`` picks what to merge of each interval (see :func:`indexing_task.compaction_job.compact`).
        """
        self.supervisors.require_leader()
        spec = self.supervisors.spec_of(datasource)
        check_against_segments(self.engine, spec)  # refused now (400), not when the task runs
        task_id = f"compact_{datasource}_{uuid.uuid4().hex[:8]}"
        self.store.insert_task(task_id, datasource, datasource, {}, {}, task_type="compact")
        future = self.runner.submit_work(
            task_id, f"compaction of {datasource}",
            lambda stop: compact(self.runner.spark, self.engine, spec, self.settings.deep_storage, interval,
                                 max_rows_per_segment=max_rows_per_segment, select=select,
                                 background=self.runner.background, stop=stop,
                                 segment_cache=self.settings.publishers_segment_cache),
            owner=datasource, compaction=True)
        future.add_done_callback(lambda done: self._finish_compaction(task_id, datasource, done))
        logger.info("compaction task %s of %s submitted (interval %s)", task_id, datasource, interval or "all",
                    extra={"task_id": task_id})
        return task_id, future

    def _finish_compaction(self, task_id: str, datasource: str, done: Future[list[CompactionReport]]) -> None:
        error = done.exception()
        if error is None:
            reports = done.result()
            ok = all(r.outcome.ok for r in reports)
            detail = f"{len(reports)} interval(s) compacted" if ok else "; ".join(
                r.outcome.message for r in reports if not r.outcome.ok)
            report = {"intervals": len(reports), "inputSegments": sum(r.input_segments for r in reports),
                      "outputSegments": sum(len(r.output_segments) for r in reports)}
        else:
            ok, detail, report = False, error_summary(error), None
        (logger.info if ok else logger.warning)("compaction task %s: %s", task_id, detail, extra={"task_id": task_id})
        self.store.finish_task(task_id, "SUCCESS" if ok else "FAILED", detail, report, self.runner.logs.take(task_id))
        self.supervisors.metrics.compactions.labels(datasource, "ok" if ok else "failed").inc()

    def set_compaction_config(self, config: CompactionConfig) -> None:
        """Store ``config`` (replacing the datasource's earlier one); the duty applies it from its next run."""
        self.supervisors.require_leader()
        self.store.set_compaction_config(config.data_source, config.to_druid_json())
        logger.info("auto-compaction config of %s: %s%s", config.data_source, config.to_druid_json(),
                    f" (ignored: {', '.join(config.ignored_fields)})" if config.ignored_fields else "")

    def compaction_configs(self) -> dict[str, CompactionConfig]:
        """The config the duty applies to each datasource: its own, or the default for a supervisor's."""
        configs = {c.data_source: c for c in map(CompactionConfig.model_validate, self.store.compaction_configs())}
        if self.settings.auto_compaction:
            for datasource in list(self.supervisors.supervisors):
                configs.setdefault(datasource, default_config(datasource))
        return configs

    def _compaction_plan(self, datasource: str, config: CompactionConfig
                         ) -> tuple[dict[Interval, list[SegmentRecord]], datetime | None, Selection]:
        """The datasource's visible segments by interval, when an interval is settled, and what to merge."""
        chunks = visible_by_interval(visible_segments(self.engine, datasource))
        cutoff = max(end for _, end in chunks) - config.skip if chunks else None
        spec_rows = self.supervisors.spec_of(datasource).spec.tuning_config.max_rows_per_segment
        rows = config.rows_per_segment or spec_rows
        return chunks, cutoff, merge_selection(cutoff or datetime.min.replace(tzinfo=UTC), rows)

    def auto_compact(self) -> list[tuple[str, Future[list[CompactionReport]]]]:
        """One run of the auto-compaction duty; the compaction tasks it started.

        A task for each datasource with a config (:meth:`compaction_configs`) where
        :func:`segments_to_merge` finds something to merge (none while one of its compactions runs).
        """
        if not self.leading:
            return []
        running = {t.datasource for t in self.store.tasks(status="RUNNING", task_type="compact")}
        started = []
        for datasource, config in self.compaction_configs().items():
            if datasource in running or not self.store.history(datasource):
                continue
            chunks, _, select = self._compaction_plan(datasource, config)
            if any(select(iv, segs) for iv, segs in chunks.items()):
                started.append(self.compact(datasource, None, config.rows_per_segment, select))
        return started

    def compaction_status(self, datasource: str) -> dict[str, Any]:
        """A datasource's compaction state: its config (own or default), the duty's last and next run.

        Per interval (newest first): segments, bytes, settled or not, and how many the duty would merge.
        """
        config = self.compaction_configs().get(datasource)
        own = any(c["dataSource"] == datasource for c in self.store.compaction_configs())
        job = self.scheduler.get_job("auto-compaction")
        last = next(iter(self.store.tasks(datasource=datasource, task_type="compact", limit=1)), None)
        chunks = visible_by_interval(visible_segments(self.engine, datasource))
        cutoff, select = None, None
        if config is not None and self.store.history(datasource):
            chunks, cutoff, select = self._compaction_plan(datasource, config)
        intervals = [{"interval": f"{start.isoformat()}/{end.isoformat()}", "segments": len(segs),
                      "bytes": sum(s.size_bytes for s in segs),
                      "avgBytes": sum(s.size_bytes for s in segs) // len(segs),
                      "settled": cutoff is not None and end <= cutoff,
                      "awaitingCompaction": len(select((start, end), segs)) if select else 0}
                     for (start, end), segs in sorted(chunks.items(), reverse=True)]
        return {
            "dataSource": datasource, "config": config.to_druid_json() if config else None,
            "defaultConfig": config is not None and not own,
            "scheduleStatus": "RUNNING" if config is not None and job is not None and self.leading else "NOT_ENABLED",
            "nextRun": job.next_run_time.isoformat() if job is not None and job.next_run_time else None,
            "lastRun": None if last is None else {
                "task": last.id, "status": last.status, "detail": last.status_detail,
                "started": last.created_at.isoformat(),
                "finished": last.finished_at.isoformat() if last.finished_at else None},
            "segmentCountAwaitingCompaction": sum(i["awaitingCompaction"] for i in intervals),
            "intervals": intervals,
        }

    # --- retention and lifecycle -----------------------------------------------------------

    def set_rules(self, datasource: str, rules: list[Rule]) -> None:
        """Store a datasource's retention rules (``_default``: the cluster's); applied from the next run."""
        self.supervisors.require_leader()
        self.store.set_rules(datasource, [r.model_dump(by_alias=True, exclude_none=True) for r in rules])
        logger.info("retention rules of %s: %s", datasource, [r.type for r in rules] or "none")

    def rules(self) -> dict[str, list[Rule]]:
        """Every datasource's own rules, and ``_default`` (``loadForever`` unless set)."""
        stored = {name: RULES.validate_python(raw) for name, raw in self.store.rules().items()}
        return {DEFAULT_RULES_KEY: DEFAULT_RULES, **stored}

    def apply_retention(self, now: datetime | None = None) -> dict[str, list[str]]:
        """One run of the retention duty: drop what the rules drop; the ids dropped, by datasource."""
        if not self.leading:
            return {}
        now = now or datetime.now(UTC)
        rules = self.rules()
        out = {}
        for datasource in datasources(self.engine):
            ruled = [*rules.get(datasource, []), *rules[DEFAULT_RULES_KEY]]
            doomed = [s.id for iv, segs in visible_by_interval(visible_segments(self.engine, datasource)).items()
                      if dropped(ruled, iv, now) for s in segs]
            if doomed and (ids := mark_unused(self.engine, datasource, segment_ids=doomed)):
                logger.info("retention dropped %d segment(s) of %s", len(ids), datasource)
                out[datasource] = ids
        return out

    def mark(self, datasource: str, used: bool, interval: Interval | None = None,
             segment_ids: list[str] | None = None) -> list[str]:
        """Mark segments used or unused (see :mod:`segment_store.lifecycle`); the ids changed."""
        self.supervisors.require_leader()
        change = mark_used if used else mark_unused
        return change(self.engine, datasource, interval=interval, segment_ids=segment_ids)

    def kill_unused(self) -> CleanupReport | None:
        """One run of the kill duty: delete what was dropped or replaced long enough ago, and old orphans.

        Dropped: ``kill_unused_after_s`` (orphans as old); replaced: ``kill_replaced_after_s``; neither before
        ``kill_backup_window_s`` (a restored backup's rows find their files); finished tasks: ``task_retention_s``.
        """
        if not self.leading:
            return None
        kept_s = self.settings.task_retention_s
        if kept_s and (deleted := self.store.delete_finished_tasks(datetime.now(UTC) - timedelta(seconds=kept_s))):
            logger.info("kill: deleted %d finished tasks older than %d s (OVERLORD_TASK_RETENTION_S)", deleted, kept_s)
        s = self.settings
        after, window = timedelta(seconds=s.kill_unused_after_s), timedelta(seconds=s.kill_backup_window_s)
        return cleanup(self.engine, DeepStorage(s.deep_storage), retention=max(after, window), orphan_grace=after,
                       replaced_retention=max(timedelta(seconds=s.kill_replaced_after_s), window),
                       keep=self.table_export.protected())

    def export_tables(self) -> list[ExportOutcome]:
        """One run of the Iceberg duty (see :class:`TableExport`): the snapshots committed."""
        return self.table_export.run() if self.leading else []
