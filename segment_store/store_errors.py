"""Errors of the segment store. Publish outcomes are values, not exceptions."""

__all__ = ["SegmentStoreError"]


class SegmentStoreError(Exception):
    """Root of the segment store's errors: infrastructure faults and bugs."""
