"""The overlord's HTTP API (Druid's supervisor, task and SQL calls), console and metrics."""
