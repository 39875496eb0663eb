"""Druid's own query tests as our conformance suite: ``python -m tests.conformance`` prints the score."""
