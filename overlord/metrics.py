"""The overlord's Prometheus metrics, with prometheus-client.

Events are counted where they happen (a task finished, a compaction ran, a query answered, an
HTTP request answered); gauges are read at scrape time from :class:`ScrapeSources` (the
supervisors' status snapshots, leadership, task slots, the visible segments in PostgreSQL); the
library adds the process, platform and garbage-collector metrics. Names follow Prometheus'
conventions (base units last, ``_total`` on counters); a datasource is always the label
``datasource``, a partition ``topic`` and ``partition``. Each overlord has a registry of its own,
so several can live in one process (tests). ``docker/monitoring/`` holds alert rules and a
dashboard over these names; a test checks that every name they use is exported here.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from indexing_task.step_costs import StepCost
from indexing_task.task import TaskReport
from overlord.supervisor_status import SupervisorStatus
from segment_store.offsets import Partition, kafka_partition

__all__ = ["Metrics", "ScrapeSources", "package_version"]

logger = logging.getLogger(__name__)

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `*_created` series beside each counter and histogram: Prometheus tracks resets

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)
_HTTP_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})
"""HTTP methods counted by name; any other is ``other`` (a client must not mint label values)."""


def package_version(name: str = "kafka-segment-indexer") -> str:
    """The installed version of ``name`` ("unknown" from a source tree that was not installed)."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class ScrapeSources:
    """What the gauges read at scrape time."""

    statuses: Callable[[], Iterable[SupervisorStatus]]
    leader_epoch: Callable[[], int | None]
    """The epoch while this overlord leads, else None."""
    slot_use: Callable[[], Mapping[str, tuple[int, int, int]]]
    """(slots, tasks running, tasks waiting for a slot) of each kind of slot: ``task``, ``compaction_task``."""
    resident_use: Callable[[], tuple[int, int]]
    """(requests sent to the resident runners, tasks in them)."""
    visible_totals: Callable[[], Mapping[str, tuple[int, int]]]
    """Visible segments and bytes per datasource."""
    step_costs: Callable[[], Mapping[str, StepCost]] = dict
    """The control plane's runs and CPU seconds by step (:mod:`indexing_task.step_costs`)."""


class Metrics:
    """The registry behind ``/metrics``."""

    def __init__(self, sources: ScrapeSources) -> None:
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        self.registry.register(_ScrapeCollector(sources))
        Info("overlord_build", "The running release", registry=self.registry).info(
            {"version": package_version(), "python_version": platform.python_version(),
             "pyspark_version": package_version("pyspark")})

        def counter(name: str, text: str, *labels: str) -> Counter:
            return Counter(name, text, labels, registry=self.registry)

        def histogram(name: str, text: str, *labels: str, buckets: tuple[float, ...] = _SECONDS) -> Histogram:
            return Histogram(name, text, labels, buckets=buckets, registry=self.registry)

        self.records = counter("overlord_records", "Records of published tasks: processed, unparseable or "
                               "thrown away", "datasource", "kind")
        self.publishes = counter("overlord_publishes", "Publish outcomes of indexing tasks: ok, retryable, fatal, "
                                 "already_published", "datasource", "outcome")
        self.tasks_failed = counter("overlord_tasks_failed", "Indexing tasks that ended before their publish "
                                    "(failed, stopped or timed out); their ranges are read again", "datasource")
        self.last_publish = Gauge("overlord_last_publish_timestamp_seconds", "When an indexing task of the "
                                  "datasource last published (Unix time)", ["datasource"], registry=self.registry)
        self.segments = counter("overlord_segments_published", "Segments published by indexing tasks", "datasource")
        self.segment_bytes = counter("overlord_segment_bytes_published", "Bytes of the segments published",
                                     "datasource")
        self.task_seconds = histogram("overlord_task_duration_seconds", "Indexing task duration, launch to end",
                                      "datasource")
        self.publish_seconds = histogram("overlord_publish_duration_seconds", "The publish transaction's duration",
                                         "datasource")
        self.compactions = counter("overlord_compaction_runs", "Compaction tasks by outcome (ok, failed)",
                                   "datasource", "outcome")
        self.query_engine_restarts = counter("overlord_query_engine_restarts", "Times the query engine's process "
                                             "was replaced: it exited (a query exhausted it) or was killed (a "
                                             "query ran past its timeout)", "reason")
        self.query_seconds = histogram("overlord_query_duration_seconds", "SQL query duration by outcome (ok, error)",
                                       "outcome")
        self.query_queue_seconds = histogram("overlord_query_queue_seconds", "How long answered queries waited for "
                                             "their turn (OVERLORD_QUERY_MAX_CONCURRENT were running)")
        self.http_requests = counter("overlord_http_requests", "HTTP requests answered, by route template and "
                                     "status", "method", "route", "status")
        self.http_seconds = histogram("overlord_http_request_duration_seconds", "HTTP request duration, first "
                                      "byte in to last byte out", "method", "route", buckets=_HTTP_SECONDS)

    def task_finished(self, datasource: str, report: TaskReport | None, seconds: float) -> None:
        """Count an indexing task's outcome (``report`` None: it ended before publishing)."""
        self.task_seconds.labels(datasource).observe(seconds)
        if report is None:
            self.tasks_failed.labels(datasource).inc()
            return
        self.publishes.labels(datasource, report.outcome.status).inc()
        self.publish_seconds.labels(datasource).observe(report.publish_seconds)
        if report.outcome.status == "ok":
            self.last_publish.labels(datasource).set(time.time())
            for kind, n in (("processed", report.processed), ("unparseable", report.unparseable),
                            ("thrown_away", report.thrown_away)):
                self.records.labels(datasource, kind).inc(n)
            self.segments.labels(datasource).inc(len(report.segments))
            self.segment_bytes.labels(datasource).inc(sum(s.size_bytes for s in report.segments))

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count an answered request (``route`` is the matched route's template, or ``unmatched``)."""
        method = method if method in _METHODS else "other"
        self.http_requests.labels(method, route, str(status)).inc()
        self.http_seconds.labels(method, route).observe(seconds)

    def exposition(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)


class SegmentCacheCollector(Collector):
    """The query engine's segment cache (:mod:`segment_store.segment_cache`), asked of its process at scrape time."""

    _COUNTERS = {"hits": "Segment files queries read from the cache", "misses": "Segment files queries needed "
                 "that the cache did not hold", "downloads": "Segment files downloaded from deep storage",
                 "downloaded_bytes": "Bytes downloaded from deep storage", "adopted": "Copies a task left that the "
                 "cache took without a download", "evictions": "Copies evicted to stay within the size limit",
                 "rejected": "Copies that failed their size or checksum check"}
    _GAUGES = {"size_bytes": "Bytes of the copies held", "files": "Copies held",
               "max_bytes": "The cache's size limit (OVERLORD_SEGMENT_CACHE_MAX_BYTES)"}

    def __init__(self, stats: Callable[[], Mapping[str, int] | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        if stats is None:  # no cache (local deep storage), or no engine running
            return
        for name, text in self._COUNTERS.items():
            yield CounterMetricFamily(f"overlord_segment_cache_{name}", text, value=stats[name])
        for name, text in self._GAUGES.items():
            yield GaugeMetricFamily(f"overlord_segment_cache_{name}", text, value=stats[name])


class _ScrapeCollector(Collector):
    """Gauges read at scrape time."""

    def __init__(self, sources: ScrapeSources) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        yield from self._supervisors(list(self._sources.statuses()))
        epoch = self._sources.leader_epoch()
        yield GaugeMetricFamily("overlord_leader", "1 while this overlord leads, 0 on a standby",
                                value=int(epoch is not None))
        yield GaugeMetricFamily("overlord_leader_epoch", "The leader epoch this overlord leads under (0 on a "
                                "standby): it grows with every election", value=epoch or 0)
        for kind, (slots, running, waiting) in self._sources.slot_use().items():
            what = kind.replace("_", " ").capitalize()
            yield GaugeMetricFamily(f"overlord_{kind}_slots", f"{what} slots (OVERLORD_{kind.upper()}_SLOTS)",
                                    value=slots)
            yield GaugeMetricFamily(f"overlord_{kind}_slots_used", f"{what} slots running a task", value=running)
            yield GaugeMetricFamily(f"overlord_{kind}s_waiting", f"{what}s waiting for a slot", value=waiting)
        yield from self._steps(self._sources.step_costs())
        requests, tasks = self._sources.resident_use()
        yield CounterMetricFamily("overlord_resident_runner_requests", "Requests sent to the resident runners",
                                  value=requests)
        yield CounterMetricFamily("overlord_resident_runner_tasks", "Tasks sent to the resident runners: more than "
                                  "requests when waiting tasks go together", value=tasks)
        try:
            totals = self._sources.visible_totals()
        except Exception:  # the metadata store is away: the other metrics still answer
            logger.warning("metrics: the visible segments could not be counted", exc_info=True)
            return
        count = GaugeMetricFamily("overlord_visible_segments", "Segments queries read (used, at the newest "
                                  "version of their interval)", labels=["datasource"])
        size = GaugeMetricFamily("overlord_visible_segment_bytes", "Bytes of the visible segments",
                                 labels=["datasource"])
        for datasource, (n, total) in sorted(totals.items()):
            count.add_metric([datasource], n)
            size.add_metric([datasource], total)
        yield count
        yield size

    @staticmethod
    def _steps(steps: Mapping[str, StepCost]) -> Iterator[Metric]:
        cpu = CounterMetricFamily("overlord_control_plane_cpu_seconds", "CPU seconds the overlord's process spent in "
                                  "each step of the control plane (its own, without the steps inside it)",
                                  labels=["step"])
        runs = CounterMetricFamily("overlord_control_plane_steps", "Runs of each step of the control plane",
                                   labels=["step"])
        for step, cost in sorted(steps.items()):
            cpu.add_metric([step], cost.cpu_s)
            runs.add_metric([step], cost.count)
        yield from (cpu, runs)

    @staticmethod
    def _supervisors(statuses: list[SupervisorStatus]) -> Iterator[Metric]:
        labels = ["datasource", "topic", "partition"]
        lag = GaugeMetricFamily("overlord_supervisor_lag_records", "Records between the committed and the latest "
                                "offset of a partition", labels=labels)
        lag_s = GaugeMetricFamily("overlord_supervisor_lag_seconds", "How long the oldest unpublished record of a "
                                  "partition has waited (since the supervisor first saw it)", labels=labels)
        state = GaugeMetricFamily("overlord_supervisor_state", "1 for the supervisor's state (Druid's: RUNNING, "
                                  "PENDING, SUSPENDED, UNHEALTHY_SUPERVISOR, UNHEALTHY_TASKS, ...)",
                                  labels=["datasource", "state"])
        for s in statuses:
            topic = s.spec.spec.io_config.topic
            for partition, records in s.lag.items():
                lag.add_metric([s.spec.datasource, *_partition_labels(partition, topic)], records)
            for partition, seconds in s.lag_seconds.items():
                lag_s.add_metric([s.spec.datasource, *_partition_labels(partition, topic)], seconds)
            state.add_metric([s.spec.datasource, s.state], 1)
        yield from (lag, lag_s, state)
        for name, text, value in (
                ("active_tasks", "Indexing tasks in flight", lambda s: len(s.active_tasks)),
                ("healthy", "1 if the supervisor is healthy, else 0", lambda s: int(s.healthy)),
                ("suspended", "1 if the supervisor is suspended, else 0", lambda s: int(s.suspended))):
            gauge = GaugeMetricFamily(f"overlord_supervisor_{name}", text, labels=["datasource"])
            read: Callable[[SupervisorStatus], int] = value
            for s in statuses:
                gauge.add_metric([s.spec.datasource], read(s))
            yield gauge
        yield GaugeMetricFamily("overlord_supervisors", "Supervisors running in this overlord", value=len(statuses))


def _partition_labels(partition: Partition, topic: str | None) -> tuple[str, str]:
    """(topic, partition number) of a partition of the spec's topic or of a ``topicPattern``'s."""
    try:
        name, number = kafka_partition(partition, topic)
    except ValueError:
        return "", str(partition)
    return name, str(number)
