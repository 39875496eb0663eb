"""The query engine in a process of its own: no user query shares a process with ingestion.

Druid keeps queries (brokers, historicals) apart from ingestion (overlord, middle managers);
so does the overlord. SQL and native queries run in a child process
(:mod:`overlord.query.engine_process_main`) with its own Spark application, its own JVM heap
(``OVERLORD_QUERY_SPARK_CONF``, ``spark.driver.memory`` 1g by default) and its own DuckDB under
its memory cap. A query that exhausts that process takes only that process down: the overlord
restarts it, counts the restart (``overlord_query_engine_restarts_total``) and answers the
queries it was running with a 503. Ingestion's JVM, the supervisors and the API never run user
SQL.

Every query has a deadline: its timeout (``context.timeout``, at most
``OVERLORD_QUERY_TIMEOUT_MS``) plus :data:`GRACE_S`. The child cancels the query's jobs at the
timeout; a query that still has not returned at the deadline (work Spark cannot cancel, such as
constant folding in the driver) is stopped by killing the child, so the thread waiting for it
is freed at the deadline whatever the query does. At most ``OVERLORD_QUERY_MAX_CONCURRENT``
queries run at once (the engine runs them in parallel: DuckDB's and Spark's work is outside the
GIL); the next ones wait for a turn up to ``OVERLORD_QUERY_QUEUE_TIMEOUT_MS`` and get a 429 in
Druid's error shape then, or at once when twice as many are waiting already.

A lost engine is replaced at once by a standby started ahead (``OVERLORD_QUERY_STANDBY``): a
Spark application takes ~20 s to start, the standby's taking over none. A query's timeout counts
from its arrival: one that waits for an engine to start gets a 503 when its timeout is up, and
only what is left of it to run. Kills count against the principal whose query it was
(:mod:`overlord.query.kill_throttle`).

The child listens on a Unix socket in a directory only this user can open, and answers only
callers that know a random key (``multiprocessing.connection``'s HMAC handshake); messages are
JSON. It exits when the overlord's end of its stdin closes, so it never outlives the overlord.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from multiprocessing.connection import Client
from typing import Any, NamedTuple

from indexing_task.child_processes import SAFE_PATH
from overlord.config import Settings
from overlord.logs import log_format
from overlord.query.kill_throttle import KillThrottle
from overlord.query.query_errors import QueryError

__all__ = ["GRACE_S", "QueryProcess"]

logger = logging.getLogger(__name__)

GRACE_S = 5.0
"""How long past its timeout a query may take to return before its engine is killed."""

START_TIMEOUT_S = 180.0
"""How long the child may take to start its Spark application and answer."""


class Answer(NamedTuple):
    """A query's result and the engine that answered it (``spark``, ``duckdb``; None: no table was read).

    ``queued_s``: how long it waited for its turn.
    """

    result: Any
    engine: str | None
    queued_s: float = 0.0


class QueryProcess:
    """A handle on the query engine's child process: started on first use, restarted when it dies.

    Thread-safe: every HTTP request thread calls :meth:`run`. ``on_restart(reason)`` is called
    each time a running child is replaced (a metric).
    """

    def __init__(self, settings: Settings, on_restart: Callable[[str], None] = lambda _reason: None) -> None:
        self._settings = settings
        self._on_restart = on_restart
        self._slots = threading.BoundedSemaphore(settings.query_max_concurrent)
        self._in_flight = 0  # changed under self._counting (self._lock may be held while a child starts)
        self._waiting = 0  # queries waiting for a slot, under self._counting
        self._counting = threading.Lock()
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._standby: _Child | None = None
        self._stopped = False
        self.throttle = KillThrottle()
        self._start_error: str | None = None
        """Why the last start failed; None once one succeeds."""

    def start(self) -> None:
        """Start the child now (in the background) rather than at the first query."""
        def start() -> None:
            try:
                self._current()
            except QueryError as exc:  # stopping, or it could not start: the next query tries again
                logger.warning("query engine not started: %s", exc.message)

        threading.Thread(target=start, name="query-engine-start", daemon=True).start()

    def wait_started(self) -> None:
        """Return once the child runs (starting it if it does not); :class:`QueryError` if it cannot start."""
        self._current()

    def health(self) -> dict[str, Any]:
        """Healthy unless the last start of the engine failed (no start since succeeded)."""
        error = self._start_error
        return {"healthy": error is None, "pid": self.pid, "error": error}

    @property
    def in_flight(self) -> int:
        """How many queries are running (or waiting for the child to start)."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """How many queries wait for their turn."""
        return self._waiting

    @property
    def pid(self) -> int | None:
        """The child's process id, if one runs."""
        child = self._child
        return child.process.pid if child is not None and child.process.poll() is None else None

    @property
    def standby_pid(self) -> int | None:
        """The standby's process id once it is ready to take over (``OVERLORD_QUERY_STANDBY``)."""
        standby = self._standby
        return standby.process.pid if standby is not None and standby.ready.is_set() else None

    def run(self, kind: str, body: Mapping[str, Any], query_id: str, timeout_ms: int,
            principal: str = "anonymous") -> Answer:
        """Run a ``sql`` or ``native`` query (``body`` as sent) in the child; its answer, or :class:`QueryError`.

        ``timeout_ms``: the query's own timeout, counted from now: a query that waits for the
        child to start gets only what is left of it; the child is killed if the answer has not
        come :data:`GRACE_S` after it, and the kill counts against ``principal``
        (:mod:`overlord.query.kill_throttle`), whose queries may be refused for it.
        """
        self.throttle.check(principal)
        timeout_at = time.monotonic() + timeout_ms / 1000
        queued_s = self._wait_for_turn(timeout_at)
        with self._counting:
            self._in_flight += 1
        try:
            current = self._child
            ready = current is not None and current.ready.is_set() and current.process.poll() is None
            child = self._current(timeout_at)
            left_ms = int((timeout_at - time.monotonic()) * 1000)
            if child is None or left_ms < 1:
                raise QueryError(f"the query engine is restarting and was not ready within the query's timeout of "
                                 f"{timeout_ms:,} ms (context.timeout); retry", "QUERY_ENGINE_UNAVAILABLE",
                                 status=503, retry_after=1)
            deadline = left_ms / 1000 + GRACE_S
            request: dict[str, Any] = {"kind": kind, "body": body, "queryId": query_id}
            if not ready or queued_s > 0.01:  # it waited (for an engine or a turn): it has what is left of its time
                request["timeoutMs"] = left_ms
            exchange = child.ask(request)
            try:
                reply = exchange.result(deadline)
            except TimeoutError:
                if self._replace(child, f"query {query_id} ran {deadline:.0f} s, past its timeout, and did not stop"):
                    self.throttle.record(principal)
                raise QueryError(f"the query ran longer than its timeout of {timeout_ms:,} ms (context.timeout, at "
                                 "most OVERLORD_QUERY_TIMEOUT_MS) and could not be cancelled: the query engine was "
                                 "restarted to stop it", "QUERY_TIMEOUT") from None
            except (OSError, EOFError) as exc:
                self._replace(child, f"it stopped answering ({type(exc).__name__}: {exc})")
                raise _engine_lost(query_id) from None
        finally:
            with self._counting:
                self._in_flight -= 1
            self._slots.release()
        if "error" in reply:
            error = reply["error"]
            raise QueryError(error["message"], error.get("errorClass"), status=error.get("status", 400))
        return Answer(reply["result"], reply.get("engine"), queued_s)

    def _wait_for_turn(self, timeout_at: float) -> float:
        """Take one of the slots, waiting for one at most the queue timeout (and the query's); the seconds waited.

        A 429 if the wait is up, or if twice as many queries as may run are waiting already.
        """
        started, settings = time.monotonic(), self._settings
        if not self._slots.acquire(blocking=False):
            with self._counting:
                full = self._waiting >= 2 * settings.query_max_concurrent
                self._waiting += not full
            if full:
                raise _busy(settings, "and as many again are waiting for their turn")
            try:
                wait_s = min(settings.query_queue_timeout_ms / 1000, timeout_at - started)
                if not self._slots.acquire(timeout=max(0.0, wait_s)):
                    raise _busy(settings, f"and none ended within {wait_s * 1000:,.0f} ms "
                                          "(OVERLORD_QUERY_QUEUE_TIMEOUT_MS, or the query's timeout)")
            finally:
                with self._counting:
                    self._waiting -= 1
        return time.monotonic() - started

    def segment_cache_stats(self) -> dict[str, int] | None:
        """The running engine's segment cache counters (:class:`segment_store.segment_cache.CacheStats`), if any."""
        child = self._child
        if child is None or not child.ready.is_set() or child.process.poll() is not None:
            return None
        try:
            stats: dict[str, int] | None = child.ask({"kind": "stats", "queryId": "stats"}).result(2)["result"][
                "segment_cache"]
            return stats
        except (OSError, EOFError, TimeoutError, KeyError):
            return None

    def cancel(self, query_id: str) -> bool:
        """Cancel the running query ``query_id``; False if the engine runs no such query."""
        child = self._child
        if child is None or child.process.poll() is not None:
            return False
        try:
            return bool(child.ask({"kind": "cancel", "queryId": query_id}).result(10)["result"])
        except (OSError, EOFError, TimeoutError):
            return False

    def stop(self) -> None:
        """Stop the child and the standby (and start no other)."""
        with self._lock:
            self._stopped = True
            children, self._child, self._standby = (self._child, self._standby), None, None
        for child in children:
            if child is not None:
                child.stop()

    def _current(self, until: float | None = None) -> _Child | None:
        """The running child, started (and waited for) if there is none; None if not ready by ``until``.

        Once it is ready, a standby is started if there is none, to take over when it is lost.
        """
        with self._lock:
            if self._stopped:
                raise QueryError("the overlord is stopping", "QUERY_ENGINE_UNAVAILABLE", status=503)
            if self._child is not None and self._child.process.poll() is not None:
                code = self._child.process.returncode
                self._child.stop()
                self._child = None
                logger.error("the query engine exited (code %s); starting a new one", code)
                self._on_restart("exited")
            if self._child is None:
                self._child = self._take_standby()
            child = self._child
        try:  # waited for without the lock: stop() must not wait for a start
            if not child.wait_ready(until):
                return None
        except QueryError as exc:
            with self._lock:
                if self._child is child:
                    self._child = None
            child.stop()
            if not self._stopped:
                self._start_error = exc.message
            raise
        self._start_error = None
        with self._lock:
            if self._settings.query_standby and not self._stopped and self._standby is None:
                self._standby = _Child.spawn(self._settings, "standby")
        return child

    def _take_standby(self) -> _Child:
        """The standby as the child (a new child if there is none or it died); caller holds the lock."""
        standby, self._standby = self._standby, None
        if standby is not None and standby.process.poll() is None:
            logger.info("query engine (pid %d) takes over from a standby started ahead (%s)", standby.process.pid,
                        "ready" if standby.ready.is_set() else "still starting")
            return standby
        if standby is not None:
            standby.stop()
        return _Child.spawn(self._settings)

    def _replace(self, child: _Child, why: str) -> bool:
        """Kill ``child`` (if still current) and put the standby in its place; False if it was replaced already."""
        with self._lock:
            if self._child is not child:
                return False  # another thread replaced it already
            self._child = self._take_standby() if not self._stopped else None
        logger.error("query engine (pid %d) killed: %s; the queries it ran fail, the next run on another",
                     child.process.pid, why)
        child.stop()
        self._on_restart("killed")
        return True


def _busy(settings: Settings, why: str) -> QueryError:
    return QueryError(f"{settings.query_max_concurrent} queries are running, the most this overlord runs at once "
                      f"(OVERLORD_QUERY_MAX_CONCURRENT), {why}; retry later", "QUERY_CAPACITY_EXCEEDED", status=429)


def _engine_lost(query_id: str) -> QueryError:
    return QueryError(f"the query engine stopped while running query {query_id} (a query exhausted it, or it "
                      "was killed); it has been restarted: retry", "QUERY_ENGINE_RESTARTED", status=503)


class _Child:
    """One started child process and how to reach it."""

    def __init__(self, process: subprocess.Popen[bytes], address: str, authkey: bytes, directory: str) -> None:
        self.process, self.address, self._authkey, self._directory = process, address, authkey, directory
        self.ready = threading.Event()
        self.started = time.monotonic()
        self.output: deque[str] = deque(maxlen=3)
        """The last lines it printed other than ``ready`` (its JVM's, if that could not start)."""

    @classmethod
    def spawn(cls, settings: Settings, role: str = "query engine") -> _Child:
        """Start the child process; :meth:`wait_ready` waits until it answers."""
        directory = tempfile.mkdtemp(prefix="overlord-query-")  # mode 0700: only this user reaches the socket
        address, authkey = os.path.join(directory, "engine.sock"), secrets.token_bytes(32)
        process = subprocess.Popen([sys.executable, "-m", "overlord.query.engine_process_main"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, start_new_session=True, env={**os.environ, SAFE_PATH: "1"})
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({"settings": settings.model_dump(mode="json"), "address": address,
                                        "authkey": authkey.hex(), "log_format": log_format()}).encode() + b"\n")
        process.stdin.flush()  # stdin stays open: the child exits when it closes
        child = cls(process, address, authkey, directory)
        started = child.started

        def read_ready() -> None:
            """Wait for the child's ``ready``; other lines are its JVM's (an error at start: kept for the message)."""
            for line in process.stdout or ():
                text = line.decode("utf-8", "replace").rstrip()
                if text == "ready" and not child.ready.is_set():
                    logger.info("%s started (pid %d) in %.1f s", role, process.pid, time.monotonic() - started)
                    child.ready.set()
                elif text:
                    child.output.append(text)
                    logger.info("%s (pid %d): %s", role, process.pid, text)

        threading.Thread(target=read_ready, name="query-engine-ready", daemon=True).start()
        return child

    def wait_ready(self, until: float | None = None) -> bool:
        """Wait until the child answers (True) or ``until`` (False).

        :class:`QueryError` if it exited, or has not answered :data:`START_TIMEOUT_S` after it was started.
        """
        while not self.ready.wait(0.5 if until is None else max(0.0, min(0.5, until - time.monotonic()))):
            if self.process.poll() is not None or time.monotonic() - self.started > START_TIMEOUT_S:
                printed = f": {' / '.join(self.output)}" if self.output else ""
                raise QueryError(f"the query engine did not start (exit code {self.process.returncode}){printed}; "
                                 "the overlord's log says why", "QUERY_ENGINE_UNAVAILABLE", status=503)
            if until is not None and time.monotonic() >= until:
                return False
        return True

    def ask(self, request: Mapping[str, Any]) -> Future[dict[str, Any]]:
        """Send ``request`` and read the reply on a thread of its own, so the caller waits with a deadline.

        The handshake too may block (a stopped child accepts connections and answers nothing);
        killing the child ends the exchange with EOFError.
        """
        future: Future[dict[str, Any]] = Future()

        def exchange() -> None:
            try:
                with Client(self.address, family="AF_UNIX", authkey=self._authkey) as conn:
                    conn.send_bytes(json.dumps(request).encode())
                    future.set_result(json.loads(conn.recv_bytes()))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=exchange, name="query-exchange", daemon=True).start()
        return future

    def stop(self) -> None:
        """Kill the child and its Spark JVM (its process group), and remove its socket."""
        try:
            os.killpg(self.process.pid, 9)
        except ProcessLookupError:
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        shutil.rmtree(self._directory, ignore_errors=True)  # stop() may come twice (a failed start, then stop)
