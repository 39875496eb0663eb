"""The supervisors' manager: persistent supervisors, their schedule, and the operations the API exposes on them.

Druid's coordinator duties (compaction, retention, kill, Iceberg export) are not here but in
:mod:`overlord.coordinator.duties`, which reaches the supervisors through this manager.

Every supervisor runs :meth:`Supervisor.run_once` on an APScheduler job every ``period``,
again as soon as one of its tasks finishes, when a task group held back by
``policy.min_task_interval_s`` is due, and every ``policy.idle_poll_s`` while it has no task
running, so a record that arrives at an idle supervisor waits about a second, not a period.
Wake-ups that arrive while a run is in progress are coalesced into one more run right after it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import wait as futures_wait
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from pyspark.sql import SparkSession

from indexing_task.cluster_looks import SharedWatermarks
from indexing_task.published_columns import check_against_segments
from indexing_task.reader import resolved_consumer_properties
from indexing_task.step_costs import STEP_COSTS, StepCost
from indexing_task.task import BeforePublish
from indexing_task.watermarks import close_metadata_clients
from overlord.config import Settings
from overlord.metrics import Metrics, ScrapeSources
from overlord.overlord_errors import NotFound, NotLeader
from overlord.supervisor.leader import LeaderElector
from overlord.supervisor.loop import Supervisor, SupervisorContext
from overlord.supervisor.metadata_store import MetadataStore, SupervisorRecord
from overlord.supervisor.policy import SupervisorPolicy
from overlord.supervisor.task_runner import TaskRunner
from segment_store import Partition, reset_offsets, upgrade_schema
from segment_store.timeline import visible_totals
from specs import SpecError, SupervisorSpec, check_update, load_supervisor_spec
from specs.masked import MASK, keep_masked_secrets

__all__ = ["Overlord"]

logger = logging.getLogger(__name__)

RESET_WAIT_S = 30.0
"""How long a reset waits for the tasks it stopped to end."""


class Overlord:
    """Owns the supervisors. Thread-safe: the HTTP API calls into it from its own threads."""

    def __init__(self, settings: Settings, engine: sa.Engine, spark: SparkSession,
                 policy: SupervisorPolicy | None = None, before_publish: BeforePublish | None = None,
                 name: str | None = None) -> None:
        """Set up (nothing runs until :meth:`start`).

        ``name`` identifies this overlord in leader election (default host:pid); ``before_publish``
        reaches every indexing task (a fault-injection hook for tests).
        """
        self.settings = settings
        self.engine = engine
        self.store = MetadataStore(engine)
        self.runner = TaskRunner(spark, engine, settings.task_slots, before_publish, settings.resident_runner_count,
                                 settings.compaction_task_slots)
        self.metrics = Metrics(ScrapeSources(
            statuses=lambda: [sup.status for sup in list(self.supervisors.values())],
            leader_epoch=lambda: self.elector.epoch, slot_use=self.runner.slot_use,
            resident_use=self.runner.resident_use,
            visible_totals=lambda: visible_totals(engine), step_costs=STEP_COSTS.snapshot))
        self.context = SupervisorContext(engine, self.store, self.runner, settings, self.wake,
                                         policy or SupervisorPolicy(max_records_per_task=settings.task_max_records,
                                                                   min_task_interval_s=settings.task_min_interval_s,
                                                                   target_records=settings.task_target_records),
                                         metrics=self.metrics, watermarks=SharedWatermarks())
        self.scheduler = BackgroundScheduler(timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1})
        self.supervisors: dict[str, Supervisor] = {}
        self._pending_wake: set[str] = set()
        self._wake_lock = threading.Lock()
        """Guards only ``_pending_wake``; never held while waiting for anything else. Not ``_lock``: an
        operation holds that while it waits for a busy supervisor's run, and every other supervisor's run
        and every finishing task (``wake``) would wait with it."""
        self._lock = threading.RLock()
        self._stopped = False
        self.elector = LeaderElector(settings.database_url,  # the name standbys redirect to, if it is a URL
                                     settings.advertised_url or name or f"{socket.gethostname()}:{os.getpid()}",
                                     self._lead, self._step_down)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Upgrade the metadata store's schema and run for leadership: a lone overlord leads before this returns."""
        upgrade_schema(self.engine)
        logging.getLogger().addHandler(self.runner.logs)
        self.scheduler.start()
        self.elector.start()
        logger.info("overlord %s started (%s)", self.elector.name, "leader" if self.leading else "standby")

    @property
    def leading(self) -> bool:
        return self.elector.leading

    def _lead(self, epoch: int) -> None:
        """Elected: forget tasks of a previous leader, resume every live supervisor under ``epoch``."""
        with self._lock:
            if self._stopped:
                return
            self.context = replace(self.context, leader_epoch=epoch)
            abandoned = self.store.fail_running_tasks("abandoned: the overlord that ran it stopped leading")
            if abandoned:
                logger.info("marked %d tasks of a previous leader as failed (they cannot publish now)", abandoned)
            for record in self.store.current_specs():
                if record.terminated:
                    continue
                try:
                    spec = load_supervisor_spec(record.spec)
                except SpecError as exc:  # stored by an older version that accepted it: the others go on
                    logger.error("supervisor %s is not resumed: its stored spec is refused now (%s); submit a "
                                 "corrected spec", record.id, exc)
                    continue
                self._start_supervisor(record.id, spec, record.suspended)
            logger.info("leading with %d supervisors (epoch %d)", len(self.supervisors), epoch)

    def _step_down(self) -> None:
        """Deposed: stop every supervisor and task, compactions too, at once (their publishes would be refused)."""
        with self._lock:
            for supervisor_id, sup in list(self.supervisors.items()):
                with sup.lock:
                    sup.stopping = True
                    sup.publish_status()
                try:
                    self.scheduler.remove_job(supervisor_id)
                except JobLookupError:
                    pass
            self.supervisors.clear()
            self.runner.stop_all()
            logger.warning("stepped down: supervisors and tasks stopped")

    def require_leader(self) -> None:
        """Raise :class:`NotLeader` unless this overlord leads (changes go to the leader only)."""
        if not self.leading:
            raise NotLeader(f"overlord {self.elector.name} is not the leader; send this to the leader")

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop launching tasks, give running ones ``grace_s`` to finish, then stop the rest unpublished."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            for sup in self.supervisors.values():
                sup.stopping = True
        # Not shutdown(wait=True): it holds APScheduler's job-store lock while it waits, and a
        # finishing run needs that lock to reschedule itself. Taking each supervisor's lock
        # below waits for its run instead.
        self.scheduler.shutdown(wait=False)
        for sup in list(self.supervisors.values()):
            with sup.lock:
                pass
        deadline = datetime.now(UTC) + timedelta(seconds=grace_s)
        for sup in list(self.supervisors.values()):
            for task in list(sup.active.values()):
                remaining = (deadline - datetime.now(UTC)).total_seconds()
                try:
                    task.future.result(timeout=max(0.0, remaining))
                except Exception:
                    pass
            with sup.lock:
                sup.update_task_status()
        self.runner.shutdown()
        logging.getLogger().removeHandler(self.runner.logs)
        close_metadata_clients()
        for sup in self.supervisors.values():
            with sup.lock:
                sup.update_task_status()
        try:
            self.store.task_rows.close()
        except Exception as exc:  # PostgreSQL unreachable: the next leader marks the rows left RUNNING failed
            logger.warning("overlord: could not write the last task rows: %s", exc)
        self.elector.stop()  # only now may a standby take over
        logger.info("overlord stopped")

    # --- scheduling ------------------------------------------------------------------------

    def _start_supervisor(self, supervisor_id: str, spec: SupervisorSpec, suspended: bool) -> None:
        sup = Supervisor(supervisor_id, spec, suspended, self.context)
        self.supervisors[supervisor_id] = sup
        self.scheduler.add_job(self._run, "interval", args=[supervisor_id], id=supervisor_id,
                               seconds=spec.spec.io_config.period.total_seconds(),
                               next_run_time=datetime.now(UTC), replace_existing=True)
        logger.info("supervisor %s started (%s)", supervisor_id, "suspended" if suspended else "running")

    def _run(self, supervisor_id: str) -> None:
        sup = self.supervisors.get(supervisor_id)
        if sup is None:
            return
        with STEP_COSTS.step("schedule.run"):
            with self._wake_lock:
                self._pending_wake.discard(supervisor_id)
            sup.run_once()
            with self._wake_lock:
                again = supervisor_id in self._pending_wake
            if again:
                self.wake(supervisor_id)
            elif (wait_s := sup.next_run_in_s()) is not None:
                self._run_at(supervisor_id, datetime.now(UTC) + timedelta(seconds=wait_s))

    def wake(self, supervisor_id: str) -> None:
        """Run a supervisor as soon as possible (now, or right after its current run)."""
        with STEP_COSTS.step("schedule.wake"):
            with self._wake_lock:
                self._pending_wake.add(supervisor_id)
            self._run_at(supervisor_id, datetime.now(UTC))

    @staticmethod
    def step_costs() -> dict[str, StepCost]:
        """The control plane's CPU time so far by step, in this process (see :mod:`indexing_task.step_costs`)."""
        return STEP_COSTS.snapshot()

    def _run_at(self, supervisor_id: str, when: datetime) -> None:
        if self._stopped:
            return
        try:
            self.scheduler.modify_job(supervisor_id, next_run_time=when)
        except JobLookupError:
            pass  # terminated meanwhile

    # --- operations ------------------------------------------------------------------------

    def submit(self, raw: Mapping[str, Any] | str | bytes, author: str | None = None, *,
               validate_only: bool = False) -> SupervisorSpec:
        """Create or update a supervisor, returning its spec. Tasks of a previous spec finish and publish under it.

        A consumer property sent as the mask answers show keeps the supervisor's stored secret. ``author``
        (the API's user) is kept in the spec history. ``validate_only`` makes every check a submit makes
        (the spec, its secrets, the update rules against the datasource's history) and changes nothing.
        """
        spec = load_supervisor_spec(self._keep_masked_secrets(raw))
        resolved_consumer_properties(spec.spec.io_config.consumer_properties)  # every secret it names is set
        if validate_only:
            self._check_published(spec)
            return spec
        self.require_leader()
        with self._lock:
            existing = self.supervisors.get(spec.id)
            self._check_published(spec)
            suspended = bool((spec.model_extra or {}).get("suspended", False))
            self.store.append_spec(spec.id, spec.to_druid_json(), suspended=suspended, author=author)
            if existing is None:
                self._start_supervisor(spec.id, spec, suspended)
            else:
                with existing.lock:
                    existing.spec = spec
                    existing.suspended = suspended
                    existing.publish_status()
                self.scheduler.reschedule_job(spec.id, trigger="interval",
                                              seconds=spec.spec.io_config.period.total_seconds())
                self.wake(spec.id)
                logger.info("supervisor %s: spec updated by %s", spec.id, author or "a local caller")
            if spec.ignored_fields:
                logger.info("supervisor %s: fields accepted without effect (they cannot change what is ingested): %s",
                            spec.id, ", ".join(spec.ignored_fields))
        return spec

    def _keep_masked_secrets(self, raw: Mapping[str, Any] | str | bytes) -> Mapping[str, Any] | str | bytes:
        """``raw`` with masked consumer properties set to the stored spec's values (see :mod:`specs.masked`)."""
        if not isinstance(raw, Mapping) or MASK not in json.dumps(raw, default=str):
            return raw
        spec = raw.get("spec")
        schema = (spec if isinstance(spec, Mapping) else raw).get("dataSchema")
        datasource = schema.get("dataSource") if isinstance(schema, Mapping) else None
        history = self.store.history(datasource) if isinstance(datasource, str) else []
        return keep_masked_secrets(raw, history[0].spec if history else None)

    def get(self, supervisor_id: str) -> Supervisor:
        sup = self.supervisors.get(supervisor_id)
        if sup is None:
            raise NotFound(f"no supervisor {supervisor_id!r}")
        return sup

    def set_suspended(self, supervisor_id: str, suspended: bool, author: str | None = None) -> Supervisor:
        self.require_leader()
        sup = self.get(supervisor_id)
        with sup.lock:
            sup.suspended = suspended
            self.store.append_spec(supervisor_id, sup.spec.to_druid_json(), suspended=suspended, author=author)
            sup.publish_status()
        logger.info("supervisor %s %s by %s", supervisor_id, "suspended" if suspended else "resumed",
                    author or "a local caller")
        self.wake(supervisor_id)
        return sup

    def reset(self, supervisor_id: str, offsets: Mapping[Partition, int] | None = None,
              wait_s: float = RESET_WAIT_S) -> Supervisor:
        """Druid's reset (forget offsets) or resetOffsets (set some).

        Running tasks are stopped and waited for (at most ``wait_s``); whatever they do after
        the reset, their publish is refused (the reset bumps the offsets' epoch).
        """
        self.require_leader()
        sup = self.get(supervisor_id)
        with sup.lock:
            stopped = [task for task_id, task in sup.active.items() if self.runner.stop(task_id)]
            futures_wait([task.future for task in stopped], timeout=wait_s)
            before, after = reset_offsets(self.engine, sup.spec.datasource, offsets)
            sup.offsets_changed()
        what = "initial" if offsets is None else ", ".join(f"{p}:{o}" for p, o in dict(offsets).items())
        self.store.record_reset(supervisor_id, sup.spec.datasource, before, after.offsets,
                                f"reset by an operator to {what} (epoch {after.epoch})")
        logger.info("supervisor %s: offsets reset to %s", supervisor_id, what)
        self.wake(supervisor_id)
        return sup

    def terminate(self, supervisor_id: str, author: str | None = None) -> None:
        """Stop the supervisor for good (a tombstone in its history); running tasks may still publish."""
        self.require_leader()
        sup = self.get(supervisor_id)
        with self._lock:
            with sup.lock:
                sup.stopping = True
                sup.publish_status()
            self.store.append_spec(supervisor_id, sup.spec.to_druid_json(), terminated=True, author=author)
            try:
                self.scheduler.remove_job(supervisor_id)
            except JobLookupError:
                pass
            del self.supervisors[supervisor_id]
        logger.info("supervisor %s terminated by %s", supervisor_id, author or "a local caller")

    def history(self, supervisor_id: str | None = None) -> list[SupervisorRecord]:
        records = self.store.history(supervisor_id)
        if supervisor_id is not None and not records:
            raise NotFound(f"no supervisor {supervisor_id!r}")
        return records

    def shutdown_task(self, task_id: str) -> None:
        if self.store.task(task_id) is None:
            raise NotFound(f"no task {task_id!r}")
        self.runner.stop(task_id)

    def _check_published(self, spec: SupervisorSpec) -> None:
        """Refuse ``spec`` if it redefines a column of the datasource's stored specs or segments."""
        check_update(self.store.datasource_history(spec.datasource), spec)
        check_against_segments(self.engine, spec)

    def spec_of(self, datasource: str) -> SupervisorSpec:
        """The datasource's current supervisor spec, or its last one if terminated."""
        sup = self.supervisors.get(datasource)  # a supervisor's id is its datasource
        return sup.spec if sup is not None else load_supervisor_spec(self.history(datasource)[0].spec)
