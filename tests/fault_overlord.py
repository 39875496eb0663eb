"""``overlord serve`` with a fault-injection hook, for crash tests: ``python -m tests.fault_overlord
--pause-before-publish SECONDS --port PORT`` pauses every task between writing its files and
publishing, so a test can kill the process at exactly that moment. Settings come from the environment.
"""

from __future__ import annotations

import argparse
import sys
import time

from indexing_task.task import IndexTaskRequest
from overlord.config import Settings
from overlord.http.server import serve


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault_overlord")
    parser.add_argument("--pause-before-publish", type=float, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()

    def pause(_request: IndexTaskRequest) -> None:
        time.sleep(args.pause_before_publish)

    return serve(Settings.from_env(), port=args.port, before_publish=pause, insecure_open=True)


if __name__ == "__main__":
    sys.exit(main())
