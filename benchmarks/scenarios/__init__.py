"""Standalone scenarios: freshness, query latency, A/B of the indexing task between git refs."""
