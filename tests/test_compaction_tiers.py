"""Which segments the auto-compaction duty merges: whole settled intervals once, fresh ones tier by tier."""

from __future__ import annotations

from datetime import UTC, datetime

from overlord.coordinator.auto_compaction import TIER_BASE_BYTES, TIER_FAN_IN, segments_to_merge
from segment_store import SegmentRecord

START, END = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 1, 1, tzinfo=UTC)


def _segment(n: int, size: int, rows: int = 10, compacted_by: dict | None = None) -> SegmentRecord:
    return SegmentRecord(id=f"s{n}", datasource="d", interval_start=START, interval_end=END, version=1,
                         partition_num=n, path=f"/x/s{n}", size_bytes=size, num_rows=rows, used=True,
                         created_at=START, descriptor={"compacted_by": compacted_by} if compacted_by else {})


def test_a_fresh_interval_merges_only_full_tiers():
    small = [_segment(n, 2_000) for n in range(TIER_FAN_IN - 1)]
    middle = [_segment(100 + n, TIER_BASE_BYTES * TIER_FAN_IN * 2) for n in range(TIER_FAN_IN - 1)]
    assert segments_to_merge(small + middle, settled=False, rows_per_segment=1_000) == []
    one_more = _segment(50, 3_000)
    picked = segments_to_merge([*small, one_more, *middle], settled=False, rows_per_segment=1_000)
    assert {s.id for s in picked} == {s.id for s in [*small, one_more]}


def test_full_segments_are_never_tiered():
    full = [_segment(n, 1_000, rows=600) for n in range(TIER_FAN_IN * 2)]
    assert segments_to_merge(full, settled=False, rows_per_segment=1_000) == []


def test_a_settled_interval_is_compacted_whole_once():
    appended = [_segment(n, 1_000) for n in range(3)]
    assert segments_to_merge(appended, settled=True, rows_per_segment=1_000) == appended
    assert segments_to_merge(appended[:1], settled=True, rows_per_segment=1_000) == []
    whole = [_segment(n, 1_000, compacted_by={"job_id": "j1", "whole_interval": True}) for n in range(3)]
    assert segments_to_merge(whole, settled=True, rows_per_segment=1_000) == []
    late = [*whole, _segment(9, 10)]  # a late record appended after the compaction: compact again
    assert segments_to_merge(late, settled=True, rows_per_segment=1_000) == late
    tiered = [_segment(n, 1_000, compacted_by={"job_id": "j2", "whole_interval": False}) for n in range(2)]
    assert segments_to_merge(tiered, settled=True, rows_per_segment=1_000) == tiered
