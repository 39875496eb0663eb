"""The overlord: the long-running service around the indexing tasks.

Subpackages, one concern each:

* ``supervisor/``: the control plane: supervisors and their run loop, the task runner, the
  overlord's own metadata store, the supervisor policy, leader election;
* ``http/``: the Druid-compatible HTTP API, the console, metrics and secret redaction;
* ``query/``: SQL over published segments: engine, read-only sandbox, result formats, segment sources;
* ``cli/``: the ``overlord`` command line and its HTTP client;
* ``dev/``: the embedded development stack (broker, PostgreSQL), sample data and the demo.

``config`` (settings) and ``errors`` are shared by all of them.
"""
