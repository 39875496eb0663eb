"""A supervisor's status as an immutable snapshot, published at the end of every run of its loop.

Readers (the HTTP API, the console, metrics) take the latest snapshot: one attribute read,
no lock, never a half-updated view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from overlord.recent_errors import SeenError
from segment_store import Offsets, Partition
from specs import SupervisorSpec

__all__ = ["ActiveTaskStatus", "CounterStatus", "FinishedTaskStatus", "SupervisorStatus"]


@dataclass(frozen=True)
class ActiveTaskStatus:
    """A task in flight."""

    id: str
    start_offsets: Offsets
    end_offsets: Offsets
    started_at: datetime


@dataclass(frozen=True)
class FinishedTaskStatus:
    """A task that finished (successfully, as a replica that lost the race, or not)."""

    id: str
    status: str
    detail: str
    start_offsets: Offsets
    end_offsets: Offsets
    started_at: datetime
    duration_s: float


@dataclass(frozen=True)
class CounterStatus:
    """Records counted since the overlord started, and processed records per second by window."""

    processed: int
    unparseable: int
    thrown_away: int
    lost_publish_races: int
    processed_per_second: Mapping[str, float]


@dataclass(frozen=True)
class SupervisorStatus:
    """Everything shown about a supervisor, as of ``generated_at``."""

    id: str
    spec: SupervisorSpec
    state: str
    detailed_state: str
    suspended: bool
    healthy: bool
    latest: Offsets
    committed: Offsets
    lag: Offsets
    lag_seconds: Mapping[Partition, float]
    """How long the oldest unpublished record of each partition has waited."""
    offsets_updated: datetime | None
    active_tasks: tuple[ActiveTaskStatus, ...]
    recent_tasks: tuple[FinishedTaskStatus, ...]
    recent_errors: tuple[SeenError, ...]
    counters: CounterStatus
    generated_at: datetime
    dimensions: Mapping[str, str] = field(default_factory=dict)
    """The dimensions of the rows published since the overlord started and their types (discovered ones included)."""
    stopped_partitions: Mapping[Partition, str] = field(default_factory=dict)
    """Partitions not read until their offsets are reset (committed offsets outside what the broker holds), and why."""
    earliest: Offsets = field(default_factory=Offsets)
    """Each partition's earliest offset on the broker: where a reset to "its start" goes."""
