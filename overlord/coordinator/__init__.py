"""Druid's coordinator duties: compaction (by hand and automatic), retention and lifecycle, kill, Iceberg export."""
