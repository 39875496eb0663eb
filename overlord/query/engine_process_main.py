"""The query engine's process (``python -m overlord.query.engine_process_main``).

Started by :mod:`overlord.query.process`, it reads one line of JSON on stdin (the overlord's
settings, the socket address, the key), starts its own Spark application, prints ``ready`` and then
answers each connection on its own thread: ``sql`` and ``native`` queries, ``cancel``. It exits when
stdin closes (the overlord is gone) or when its Spark JVM has died (a query exhausted it): the
overlord starts a new one.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from dataclasses import asdict, replace
from multiprocessing.connection import Connection, Listener
from typing import Any

from overlord.config import Settings, cpu_list
from overlord.logs import configure_logging
from overlord.query.engine import ANSWERED_BY
from overlord.query.query_errors import QueryError

logger = logging.getLogger("overlord.query.engine_process_main")

QUERY_APP_NAME = "overlord-query"

QUERY_NICENESS = 10
"""The engine runs at a lower CPU priority than ingestion and the API: where they share cores, a
busy query slows down before ingestion or a status request does."""


def main() -> None:
    """Serve queries until stdin closes."""
    config = json.loads(sys.stdin.readline())
    configure_logging(logging.INFO, config["log_format"], process="query-engine")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line for each query's thread: its gateway connection
    os.nice(QUERY_NICENESS)  # before Spark starts: its JVM inherits it
    settings = Settings.model_validate(config["settings"])
    if settings.query_cpus is not None:
        os.sched_setaffinity(0, cpu_list(settings.query_cpus))  # the JVM inherits it too, and sizes local[*] by it
    engine = _Engine(settings)
    listener = Listener(config["address"], family="AF_UNIX", authkey=bytes.fromhex(config["authkey"]))
    threading.Thread(target=_exit_when_stdin_closes, name="parent-watch", daemon=True).start()
    print("ready", flush=True)
    while True:
        try:
            conn = listener.accept()
        except Exception:  # a caller without the key: refused by the handshake
            logger.warning("refused a connection to the query engine", exc_info=True)
            continue
        threading.Thread(target=engine.answer, args=(conn,), name="query", daemon=True).start()


def _exit_when_stdin_closes() -> None:
    sys.stdin.read()
    os._exit(0)


class _Engine:
    """The Spark session, metadata engine, DuckDB and limits every query of this process uses."""

    def __init__(self, settings: Settings) -> None:
        from indexing_task.spark import get_spark
        from overlord.query.engine import QueryLimits
        from overlord.query.local_engine import LocalEngine
        from segment_store.database import metadata_engine

        # A local Spark by default: a second application on ingestion's cluster would compete with it for
        # cores (a standalone master gives an application every free core unless spark.cores.max says less).
        conf = (settings.spark_conf if settings.query_spark_master else {}) | settings.query_spark_conf
        java_options = conf.get("spark.driver.extraJavaOptions", "-Dlog4j.rootLogger=WARN")
        conf["spark.driver.extraJavaOptions"] = f"{java_options} -XX:+ExitOnOutOfMemoryError"
        self.spark = get_spark(settings.query_spark_master or "local[*]", conf, app_name=QUERY_APP_NAME)
        self.spark.range(1).collect()  # the first job of a new JVM is slow: not a user's query
        self.engine = metadata_engine(settings.database_url)
        self.local = LocalEngine.from_settings(settings)
        if self.local.cache is not None:
            self.local.cache.keep_in_sync(self.engine)
        self.limits = QueryLimits.from_settings(settings)
        self._warm_up()

    def _warm_up(self) -> None:
        """Run a SQL and a native query before ``ready``: the first of each imports and plans for seconds."""
        for kind, body in (("sql", {"query": "SELECT 1"}),
                           ("native", {"queryType": "timeBoundary", "dataSource": "warm-up"})):
            try:
                self._run({"kind": kind, "queryId": f"warm-up-{kind}", "body": body})
            except QueryError:
                pass  # no such datasource: planned all the same

    def answer(self, conn: Connection) -> None:
        """Answer one request on ``conn``; exit the process if its Spark JVM has died meanwhile."""
        with conn:
            try:
                request = json.loads(conn.recv_bytes())
                reply: dict[str, Any] = {"result": self._run(request), "engine": ANSWERED_BY.get()}
            except QueryError as exc:
                reply = {"error": {"message": exc.message, "errorClass": exc.error_class, "status": exc.status}}
            except RecursionError:  # sqlglot's parser (and tree walks) recurse once per level of nesting
                reply = {"error": {"message": "the query nests too deeply (parentheses, functions or subqueries "
                                              "inside each other): flatten it", "errorClass": "QUERY_TOO_DEEP",
                                   "status": 400}}
            except Exception as exc:
                if not self._spark_alive():
                    logger.error("the query engine's Spark JVM died (%s); exiting so the overlord starts another",
                                 type(exc).__name__)
                    os._exit(3)
                logger.exception("query failed")
                reply = {"error": {"message": "internal error in the query engine; the overlord's log has the "
                                              "traceback", "errorClass": "INTERNAL", "status": 500}}
            try:
                conn.send_bytes(json.dumps(reply).encode())
            except OSError:
                pass  # the overlord gave up waiting

    def _run(self, request: dict[str, Any]) -> Any:
        from overlord.query.engine import SqlQuery
        from overlord.query.native import run_native
        from overlord.query.running import cancel_query

        kind, query_id, body = request["kind"], request["queryId"], request.get("body")
        left_ms = request.get("timeoutMs")  # what is left of the query's timeout once the overlord sent it
        if kind == "sql":
            query = SqlQuery.model_validate(body)
            limits = query.limits(self.limits)  # the query's own timeout, checked against the overlord's limit
            if left_ms is not None and left_ms < limits.timeout_ms:
                query = query.model_copy(update={"context": {**query.context, "timeout": left_ms}})
            return query.run(self.spark, self.engine, self.limits, query_id, self.local)
        if kind == "native":
            limits = self.limits if left_ms is None else replace(self.limits, timeout_ms=min(left_ms,
                                                                                              self.limits.timeout_ms))
            return run_native(self.spark, self.engine, body, limits, query_id, self.local)
        if kind == "cancel":
            return cancel_query(query_id)
        if kind == "stats":
            cache = self.local.cache
            return {"segment_cache": asdict(cache.stats) if cache is not None and cache.owned.is_set() else None}
        raise ValueError(f"unknown request kind {kind!r}")

    def _spark_alive(self) -> bool:
        try:
            return not self.spark.sparkContext._jsc.sc().isStopped()
        except Exception:
            return False


if __name__ == "__main__":
    main()
