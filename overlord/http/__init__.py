"""The overlord's HTTP API (Druid's supervisor, task and SQL calls), status page and metrics."""
