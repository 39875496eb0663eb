"""Druid-shaped status and stats views of a supervisor's status snapshot."""

from __future__ import annotations

from typing import Any

from overlord.recent_errors import SeenError
from overlord.supervisor_status import SupervisorStatus

__all__ = ["stats_payload", "status_payload"]


def status_payload(status: SupervisorStatus) -> dict[str, Any]:
    """Druid's ``GET /supervisor/{id}/status`` body."""
    io = status.spec.spec.io_config
    now = status.generated_at
    return {"id": status.id, "generationTime": now.isoformat(), "payload": {
        "dataSource": status.spec.datasource, "stream": io.topic or io.topic_pattern, "partitions": len(status.latest),
        "replicas": io.replicas, "taskCount": io.task_count,
        "durationSeconds": int(io.task_duration.total_seconds()),
        "activeTasks": [{
            "id": t.id, "startingOffsets": t.start_offsets.to_json(), "endOffsets": t.end_offsets.to_json(),
            "startTime": t.started_at.isoformat(),
            "runningSeconds": round(max(0.0, (now - t.started_at).total_seconds()), 3)}
            for t in status.active_tasks],
        "recentTasks": [{
            "id": t.id, "status": t.status, "statusDetail": t.detail, "startOffsets": t.start_offsets.to_json(),
            "endOffsets": t.end_offsets.to_json(), "startTime": t.started_at.isoformat(),
            "durationSeconds": t.duration_s} for t in status.recent_tasks],
        "earliestOffsets": status.earliest.to_json(),
        "latestOffsets": status.latest.to_json(), "committedOffsets": status.committed.to_json(),
        "minimumLag": status.lag.to_json(), "aggregateLag": sum(status.lag.values()),
        "minimumLagMillis": {str(p): round(s * 1000) for p, s in status.lag_seconds.items()},
        "maxLagMillis": round(max(status.lag_seconds.values(), default=0.0) * 1000),
        "offsetsLastUpdated": status.offsets_updated.isoformat() if status.offsets_updated else None,
        "suspended": status.suspended, "healthy": status.healthy, "state": status.state,
        "detailedState": status.detailed_state, "ignoredFields": status.spec.ignored_fields,
        **({"discoveredDimensions": list(status.dimensions),
            "discoveredSchema": [{"name": name, "type": kind.upper()} for name, kind in status.dimensions.items()]}
           if status.spec.spec.data_schema.dimensions_spec.discovers else {}),
        "recentErrors": [_error(e) for e in status.recent_errors if e.resolved is None],
        "resolvedErrors": [{**_error(e), "resolvedTimestamp": e.resolved.isoformat()} for e in status.recent_errors
                           if e.resolved is not None],
        "stoppedPartitions": {str(p): reason for p, reason in status.stopped_partitions.items()},
        "counters": counters(status)}}


def _error(error: SeenError) -> dict[str, Any]:
    """Druid's recent error (``timestamp``: the last time) with how often it came since ``firstTimestamp``."""
    return {"timestamp": error.last.isoformat(), "message": error.message, "count": error.count,
            "firstTimestamp": error.first.isoformat()}


def counters(status: SupervisorStatus) -> dict[str, Any]:
    c = status.counters
    return {"processed": c.processed, "unparseable": c.unparseable, "thrownAway": c.thrown_away,
            "lostPublishRaces": c.lost_publish_races, "processedPerSecond": dict(c.processed_per_second)}


def stats_payload(status: SupervisorStatus) -> dict[str, Any]:
    """Druid's ``/stats`` shape: per task group, totals and moving averages."""
    c = counters(status)
    return {"0": {status.id: {
        "totals": {"buildSegments": {"processed": c["processed"], "unparseable": c["unparseable"],
                                     "thrownAway": c["thrownAway"]}},
        "movingAverages": {"buildSegments": {
            window: {"processed": rate} for window, rate in c["processedPerSecond"].items()}}}}}
