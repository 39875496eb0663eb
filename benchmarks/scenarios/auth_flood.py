"""Auth flood: wrong HTTP Basic passwords from many clients, while a logged-in client measures latency.

Starts ``overlord serve`` with authentication on (an auth file with a reader and a writer) on the
embedded stack, measures ``GET /druid/indexer/v1/supervisor`` of an already logged-in reader for
``--baseline-s``, then again while ``--clients`` clients send wrong passwords (a new random one
each request, so no cache of failures helps) for ``--seconds``; prints and saves p50/p95/max
latency and the server process's RSS before, at peak and after. ``--overlord-src DIR`` runs the
server from another source tree (``git archive HEAD | tar -x -C DIR`` of an older commit).

    python -m benchmarks.scenarios.auth_flood --clients 60 --seconds 25

Other scenarios start the same flood next to their own load with :func:`flood_in_background`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.results_file import parse_args, save_results
from benchmarks.suite import machine

READER, WRITER = ("grafana", "read-pw-1"), ("admin", "write-pw-2")
PATH = "/druid/indexer/v1/supervisor"


async def _flood(url: str, clients: int, seconds: float, user: str) -> dict[str, Any]:
    """``clients`` connections sending ``GET PATH`` with ``user`` and a new wrong password each, for ``seconds``."""
    statuses: Counter[str] = Counter()
    deadline = time.monotonic() + seconds

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            while time.monotonic() < deadline:
                try:
                    answer = await http.get(PATH, auth=(user, secrets.token_hex(8)))
                    statuses[str(answer.status_code)] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.monotonic() - started
    return {"clients": clients, "seconds": round(elapsed, 1), "requests": sum(statuses.values()),
            "requests_per_s": round(sum(statuses.values()) / elapsed, 1), "statuses": dict(statuses)}


@dataclass
class Flood:
    """A flood running in a child process (its CPU is not this process's); :meth:`wait` for its counts."""

    process: subprocess.Popen[str]
    counts: dict[str, Any] = field(default_factory=dict)

    def wait(self, timeout_s: float = 120) -> dict[str, Any]:
        """The flood's request counts by status, once it is over."""
        out, err = self.process.communicate(timeout=timeout_s)
        if self.process.returncode != 0:
            raise RuntimeError(f"the flood failed ({self.process.returncode}): {err[-2000:]}")
        self.counts = json.loads(out.strip().splitlines()[-1])
        return self.counts


@contextmanager
def flood_in_background(url: str, *, clients: int = 60, seconds: float = 25.0, user: str = WRITER[0]
                        ) -> Iterator[Flood]:
    """Run the wrong-password flood against ``url`` in a child process while the ``with`` body runs.

    Leaving the block early stops the flood; otherwise :meth:`Flood.wait` (or the exit) waits for its end.
    """
    command = [sys.executable, "-m", "benchmarks.scenarios.auth_flood", "--flood-only", url,
               "--clients", str(clients), "--seconds", str(seconds), "--user", user]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=Path(__file__).parents[2],
                               preexec_fn=lambda: os.nice(19) if os.environ.get("HOSTILE_REMOTE_ATTACKERS") else None)
    flood = Flood(process)
    try:
        yield flood
    finally:
        if process.poll() is None and not flood.counts:
            process.kill()
        process.wait(30)


def measure_latency(url: str, stop: threading.Event, interval_s: float = 0.05,
                    logged_in: threading.Event | None = None) -> list[float]:
    """Latencies (ms) of a logged-in reader's ``GET PATH``, one every ``interval_s``, until ``stop``.

    ``logged_in`` is set once the password has been verified (the first check spawns the hashing
    process: seconds, which a short window would spend waiting).
    """
    latencies = []
    with httpx.Client(base_url=url, timeout=60, auth=READER) as http:
        # Log in: the password is verified once, then remembered. Under the flood the server may
        # have no room for one more password check: like any client, try again after a 429.
        while (login := http.get(PATH)).status_code == 429 and not stop.wait(0.2):
            pass
        login.raise_for_status()
        if logged_in is not None:
            logged_in.set()
        while not stop.is_set():
            started = time.perf_counter()
            http.get(PATH).raise_for_status()
            latencies.append((time.perf_counter() - started) * 1000)
            stop.wait(interval_s)
    return latencies


def summary(latencies_ms: list[float]) -> dict[str, float | int]:
    ordered = sorted(latencies_ms)
    return {"requests": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 1), "max_ms": round(ordered[-1], 1)}


def _rss_mb(pid: int) -> float:
    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def _latency_while(url: str, seconds: float, pid: int) -> tuple[list[float], float]:
    """Latencies for ``seconds`` and the server's peak RSS (MB) meanwhile."""
    stop, logged_in, latencies, peak = threading.Event(), threading.Event(), [], 0.0
    measuring = threading.Thread(target=lambda: latencies.extend(measure_latency(url, stop, logged_in=logged_in)))
    measuring.start()
    logged_in.wait(120)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, _rss_mb(pid))
        time.sleep(0.25)
    stop.set()
    measuring.join()
    return latencies, peak


def write_auth_file(path: Path) -> Path:
    from overlord.http.auth import hash_password

    path.write_text(json.dumps({"users": {
        READER[0]: {"role": "read", "passwordHash": hash_password(READER[1])},
        WRITER[0]: {"role": "write", "passwordHash": hash_password(WRITER[1])}}}))
    return path


def run(clients: int, seconds: float, baseline_s: float, overlord_src: Path | None) -> dict[str, Any]:
    from overlord.dev.stack import dev_stack, free_port

    with tempfile.TemporaryDirectory(prefix="bench-auth-flood-") as workdir, dev_stack() as stack:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, **stack.as_env(), "OVERLORD_AUTH_FILE": str(write_auth_file(Path(workdir) / "auth.json")),
               "SPARK_LOCAL_IP": "127.0.0.1", "OVERLORD_SPARK_CONF": json.dumps({"spark.driver.host": "127.0.0.1"})}
        if overlord_src is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(overlord_src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        log = Path(workdir) / "overlord.log"
        with log.open("wb") as out:
            server = subprocess.Popen([sys.executable, "-m", "overlord.cli", "serve", "--port", str(port)],
                                      env=env, stdout=out, stderr=subprocess.STDOUT, cwd=overlord_src)
        try:
            _wait_healthy(url, server, log)
            time.sleep(2)  # let start-up work settle
            rss_before = _rss_mb(server.pid)
            baseline, _ = _latency_while(url, baseline_s, server.pid)
            with flood_in_background(url, clients=clients, seconds=seconds) as flood:
                time.sleep(1)  # the flood's clients connect
                during, rss_peak = _latency_while(url, seconds - 1, server.pid)
                counts = flood.wait()
            rss_after = _rss_mb(server.pid)
        finally:
            server.terminate()
            server.wait(60)
    return {"scenario": "auth_flood", "code": str(overlord_src or "this tree"), "machine": machine.info(),
            "load_avg_at_end": machine.load_average(), "flood": counts,
            "latency_logged_in_before": summary(baseline), "latency_logged_in_during_flood": summary(during),
            "server_rss_mb": {"before": rss_before, "peak_during_flood": rss_peak, "after": rss_after}}


def _wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"overlord exited with {server.returncode}; see {log}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"overlord did not answer /health within {timeout_s:.0f} s; see {log}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scenarios.auth_flood")
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--baseline-s", type=float, default=5.0)
    parser.add_argument("--overlord-src", type=Path, help="run the server from this source tree (e.g. old code)")
    parser.add_argument("--out", type=Path, default=Path("auth_flood.json"),
                        help="a name under benchmarks/results, or a path")
    parser.add_argument("--flood-only", metavar="URL", help=argparse.SUPPRESS)  # the child of flood_in_background
    parser.add_argument("--user", default=WRITER[0], help=argparse.SUPPRESS)
    args = parse_args(parser, {"clients": 4, "seconds": 2.0, "baseline_s": 1.0})
    if args.flood_only:
        print(json.dumps(asyncio.run(_flood(args.flood_only, args.clients, args.seconds, args.user))))
        return 0
    result = run(args.clients, args.seconds, args.baseline_s, args.overlord_src)
    save_results(result, args.out, args.smoke)
    before, during = result["latency_logged_in_before"], result["latency_logged_in_during_flood"]
    rss = result["server_rss_mb"]
    print(f"flood: {result['flood']['requests']:,} requests from {args.clients} clients in "
          f"{result['flood']['seconds']} s, statuses {result['flood']['statuses']}")
    print(f"logged-in GET {PATH}: before p50 {before['p50_ms']} / p95 {before['p95_ms']} / max {before['max_ms']} ms; "
          f"during the flood p50 {during['p50_ms']} / p95 {during['p95_ms']} / max {during['max_ms']} ms "
          f"({during['requests']} requests)")
    print(f"server RSS: {rss['before']} MB before, {rss['peak_during_flood']} MB peak, {rss['after']} MB after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
