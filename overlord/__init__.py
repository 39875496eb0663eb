"""The overlord: command line, configuration, the embedded dev stack (supervisors and HTTP API to come)."""
