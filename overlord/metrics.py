"""The overlord's Prometheus metrics, with prometheus-client.

Events are counted where they happen (a task finished, a compaction ran, a query answered);
lag and supervisor states are read from the supervisors' status snapshots at scrape time; the
library adds the process, platform and garbage-collector metrics. Each overlord has a registry
of its own, so several can live in one process (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from indexing_task.task import TaskReport
from overlord.supervisor.status import SupervisorStatus

__all__ = ["Metrics"]

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600)


class Metrics:
    """The registry behind ``/metrics``; ``statuses`` gives the supervisors' current snapshots."""

    def __init__(self, statuses: Callable[[], Iterable[SupervisorStatus]]) -> None:
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        self.registry.register(_StatusCollector(statuses))

        def counter(name: str, text: str, *labels: str) -> Counter:
            return Counter(name, text, labels, registry=self.registry)

        def histogram(name: str, text: str, *labels: str) -> Histogram:
            return Histogram(name, text, labels, buckets=_SECONDS, registry=self.registry)

        self.records = counter("overlord_records", "Records of published tasks: processed, unparseable or "
                               "thrown away", "supervisor", "kind")
        self.publishes = counter("overlord_publishes", "Publish outcomes of indexing tasks: ok, retryable, fatal, "
                                 "already_published", "supervisor", "outcome")
        self.segments = counter("overlord_segments_published", "Segments published by indexing tasks", "supervisor")
        self.segment_bytes = counter("overlord_segment_bytes_published", "Bytes of the segments published",
                                     "supervisor")
        self.task_seconds = histogram("overlord_task_duration_seconds", "Indexing task duration, launch to end",
                                      "supervisor")
        self.publish_seconds = histogram("overlord_publish_duration_seconds", "The publish transaction's duration",
                                         "supervisor")
        self.compactions = counter("overlord_compaction_runs", "Compaction tasks by outcome (ok, failed)",
                                   "datasource", "outcome")
        self.query_engine_restarts = counter("overlord_query_engine_restarts", "Times the query engine's process "
                                             "was replaced: it exited (a query exhausted it) or was killed (a "
                                             "query ran past its timeout)", "reason")
        self.query_seconds = histogram("overlord_query_duration_seconds", "SQL query duration by outcome (ok, error)",
                                       "outcome")

    def task_finished(self, supervisor: str, report: TaskReport | None, seconds: float) -> None:
        """Count an indexing task's outcome (``report`` None: it failed before publishing)."""
        self.task_seconds.labels(supervisor).observe(seconds)
        if report is None:
            return
        self.publishes.labels(supervisor, report.outcome.status).inc()
        self.publish_seconds.labels(supervisor).observe(report.publish_seconds)
        if report.outcome.status == "ok":
            for kind, n in (("processed", report.processed), ("unparseable", report.unparseable),
                            ("thrown_away", report.thrown_away)):
                self.records.labels(supervisor, kind).inc(n)
            self.segments.labels(supervisor).inc(len(report.segments))
            self.segment_bytes.labels(supervisor).inc(sum(s.size_bytes for s in report.segments))

    def exposition(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)


class _StatusCollector(Collector):
    """Gauges from the supervisors' latest snapshots, read at scrape time."""

    def __init__(self, statuses: Callable[[], Iterable[SupervisorStatus]]) -> None:
        self._statuses = statuses

    def collect(self) -> Iterator[Metric]:
        statuses = list(self._statuses())
        lag = GaugeMetricFamily("overlord_supervisor_lag_records", "Records between the committed and the latest "
                                "offset of a partition", labels=["supervisor", "partition"])
        lag_s = GaugeMetricFamily("overlord_supervisor_lag_seconds", "How long the oldest unpublished record of a "
                                  "partition has waited (since the supervisor first saw it)",
                                  labels=["supervisor", "partition"])
        for s in statuses:
            for partition, records in s.lag.items():
                lag.add_metric([s.id, str(partition)], records)
            for partition, seconds in s.lag_seconds.items():
                lag_s.add_metric([s.id, str(partition)], seconds)
        yield lag
        yield lag_s
        for name, text, value in (
                ("active_tasks", "Indexing tasks in flight", lambda s: len(s.active_tasks)),
                ("healthy", "1 if the supervisor is healthy, else 0", lambda s: int(s.healthy)),
                ("suspended", "1 if the supervisor is suspended, else 0", lambda s: int(s.suspended))):
            gauge = GaugeMetricFamily(f"overlord_supervisor_{name}", text, labels=["supervisor"])
            read: Callable[[SupervisorStatus], int] = value
            for s in statuses:
                gauge.add_metric([s.id], read(s))
            yield gauge
        yield GaugeMetricFamily("overlord_supervisors", "Supervisors running in this overlord", value=len(statuses))
