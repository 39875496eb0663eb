"""``overlord serve`` with fault-injection hooks, for crash and fencing tests.

``python -m tests.fault_overlord --port PORT`` and any of:

* ``--pause-before-publish SECONDS``: every task sleeps between writing its files and
  publishing, so a test can kill the process at exactly that moment;
* ``--hold-before-publish DIR``: every task writes ``DIR/held-{task_id}`` there instead and
  waits until ``DIR/release`` exists;
* ``--deaf-leader``: once elected, the overlord never checks its leader session again, as a
  leader cut off from noticing that it was deposed (a zombie).

Settings come from the environment.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from indexing_task.task import IndexTaskRequest
from overlord.config import Settings
from overlord.http.server import serve
from overlord.supervisor.leader import LeaderElector


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault_overlord")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pause-before-publish", type=float, default=0)
    parser.add_argument("--hold-before-publish", type=Path)
    parser.add_argument("--deaf-leader", action="store_true")
    args = parser.parse_args()

    def before_publish(request: IndexTaskRequest) -> None:
        time.sleep(args.pause_before_publish)
        if args.hold_before_publish:
            (args.hold_before_publish / f"held-{request.task_id}").touch()
            while not (args.hold_before_publish / "release").exists():
                time.sleep(0.05)

    if args.deaf_leader:
        LeaderElector._run = lambda self: self._stop.wait()  # type: ignore[method-assign]

    return serve(Settings.from_env(), port=args.port, before_publish=before_publish, insecure_open=True)


if __name__ == "__main__":
    sys.exit(main())
