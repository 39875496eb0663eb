"""The README's first command's last step, ``overlord quickstart``, as a new user runs it: the
console fills in, a first query is printed, and Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from overlord.dev.stack import free_port
from tests.helpers import wait_until

pytestmark = pytest.mark.long  # the quickstart command end to end

FIRST_RESULT = re.compile(r"\(\d+ rows?\)$")  # the first task may hold fewer than all 8 countries


@pytest.mark.own_stack
def test_quickstart_shows_the_running_service_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "overlord.cli", "quickstart", "--port", str(port),
                                "--rate", "200"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "COLUMNS": "160"}, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True)
    reader.start()
    try:
        try:
            wait_until(lambda: any(FIRST_RESULT.match(line) for line in lines) or process.poll() is not None,
                       "the first query's result", 240)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it printed:\n{''.join(lines)}") from None
        assert process.poll() is None, "".join(lines)
        ready_s = time.monotonic() - started
        assert any(f"console: http://127.0.0.1:{port}/" in line for line in lines)
        overview = httpx.get(f"http://127.0.0.1:{port}/console/api/overview", timeout=10).json()
        [events] = overview["supervisors"]
        assert events["id"] == "events" and events["payload"]["state"] == "RUNNING"
        assert events["payload"]["counters"]["processed"] > 0
        assert overview["datasources"][0]["rows"] > 0
        print(f"console filled in and first query printed {ready_s:.0f} s after the command started")
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
        code = process.wait(90)
        reader.join(10)
    output = "".join(lines)
    assert code == 0, output
    assert output.rstrip().endswith("stopped"), output[-2000:]
