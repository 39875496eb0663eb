"""Druid-shaped status, stats and spec views of a supervisor, with secrets masked."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from overlord.supervisor.loop import Supervisor

__all__ = ["mask_secrets", "stats_payload", "status_payload"]

_SECRET_KEY = re.compile(r"password|secret|jaas|credential|token|ssl\.key|sasl\.oauthbearer", re.IGNORECASE)
MASK = "<masked>"


def mask_secrets(value: Any) -> Any:
    """A copy of a spec (or any JSON) with secret-looking consumer properties replaced by a mask."""
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and _SECRET_KEY.search(k) and not isinstance(v, dict | list)
                    else mask_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def _str_keys(offsets: dict[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in sorted(offsets.items())}


def status_payload(sup: Supervisor) -> dict[str, Any]:
    io = sup.spec.spec.io_config
    now = sup.clock()
    lag = sup.lag()
    return {"id": sup.id, "generationTime": datetime.now(UTC).isoformat(), "payload": {
        "dataSource": sup.spec.datasource, "stream": io.topic, "partitions": len(sup.latest),
        "replicas": io.replicas, "taskCount": io.task_count,
        "durationSeconds": int(io.task_duration.total_seconds()),
        "activeTasks": [{
            "id": task_id, "startingOffsets": _str_keys(dict(t.request.start_offsets)),
            "endOffsets": _str_keys(dict(t.request.end_offsets)), "startTime": t.started_at.isoformat(),
            "runningSeconds": round(now - t.started, 3)} for task_id, t in sup.active.items()],
        "recentTasks": list(sup.recent_tasks),
        "latestOffsets": _str_keys(sup.latest), "committedOffsets": _str_keys(sup.committed),
        "minimumLag": _str_keys(lag), "aggregateLag": sum(lag.values()),
        "offsetsLastUpdated": sup.offsets_updated.isoformat() if sup.offsets_updated else None,
        "suspended": sup.suspended, "healthy": sup.healthy, "state": sup.state,
        "detailedState": sup.detailed_state, "recentErrors": list(sup.recent_errors),
        "counters": counters(sup)}}


def counters(sup: Supervisor) -> dict[str, Any]:
    c, now = sup.counters, sup.clock()
    return {"processed": c.processed, "unparseable": c.unparseable, "thrownAway": c.thrown_away,
            "lostPublishRaces": c.lost_publish_races,
            "processedPerSecond": {"1m": round(c.rate(now, 60), 1), "5m": round(c.rate(now, 300), 1),
                                   "15m": round(c.rate(now, 900), 1)}}


def stats_payload(sup: Supervisor) -> dict[str, Any]:
    """Druid's ``/stats`` shape: per task group, totals and moving averages."""
    c = counters(sup)
    return {"0": {sup.id: {
        "totals": {"buildSegments": {"processed": c["processed"], "unparseable": c["unparseable"],
                                     "thrownAway": c["thrownAway"]}},
        "movingAverages": {"buildSegments": {
            window: {"processed": rate} for window, rate in c["processedPerSecond"].items()}}}}}
