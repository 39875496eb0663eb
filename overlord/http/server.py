"""The ``overlord serve`` process: metadata store, Spark, the :class:`Overlord` core and the HTTP server.

Shutdown on SIGINT/SIGTERM: uvicorn stops accepting connections and gives in-flight requests
up to ``HTTP_DRAIN_S``; then :meth:`Overlord.stop` gives running tasks ``shutdown_grace``
seconds to publish and stops the rest before they publish (a task checks its stop event
between writing files and the publish transaction, and the publish is one transaction), so
nothing is half-published. The process then exits 0.
"""

from __future__ import annotations

import gc
import logging

import uvicorn

from indexing_task.child_processes import ignore_working_directory
from indexing_task.task import BeforePublish
from overlord.config import Settings
from overlord.http.app import create_app
from overlord.http.auth import Authenticator, AuthFile
from overlord.http.redact import SecretLogFilter, SecretRegistry
from segment_store.database import metadata_engine

__all__ = ["HTTP_DRAIN_S", "authenticator_for", "install_log_filter", "serve"]

logger = logging.getLogger(__name__)

HTTP_DRAIN_S = 5
"""At most this long (or ``shutdown_grace`` if shorter) for in-flight HTTP requests at shutdown."""


def install_log_filter(secrets: SecretRegistry) -> None:
    """Scrub known secret values from every line the root logger's handlers write (uvicorn's included)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in root.handlers:
        if not any(isinstance(f, SecretLogFilter) for f in handler.filters):
            handler.addFilter(SecretLogFilter(secrets))


def authenticator_for(settings: Settings, insecure_open: bool) -> Authenticator | None:
    """The authenticator of ``settings.auth_file``; None (open) only when asked for explicitly."""
    if settings.auth_file:
        return Authenticator(AuthFile.load(settings.auth_file))
    if not insecure_open:
        raise SystemExit("refusing to start without authentication: set OVERLORD_AUTH_FILE to a file of users "
                         "and tokens (`overlord auth hash-password`, `overlord auth new-token`), or pass "
                         "--insecure-open to let anyone who reaches the port manage supervisors and run SQL")
    logger.warning("AUTHENTICATION IS OFF (--insecure-open): anyone who reaches this port can submit, reset and "
                   "terminate supervisors and run SQL")
    return None


def freeze_the_startup_heap() -> None:
    """Exempt what startup built (PySpark, SQLAlchemy, FastAPI, pydantic) from the cyclic GC.

    It lives as long as the process, yet every full collection walked it: 95-200 ms each with
    the GIL held, every request waiting meanwhile. Frozen (:func:`gc.freeze`), later collections
    walk only what was allocated since. Reference counting still frees frozen objects.
    """
    gc.collect()
    gc.freeze()
    logger.info("startup heap frozen: %d objects exempt from the cyclic GC", gc.get_freeze_count())


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8090, shutdown_grace: float = 30.0,
          before_publish: BeforePublish | None = None, insecure_open: bool = False,
          ssl: tuple[str, str | None] | None = None) -> int:
    """Run the overlord until SIGINT/SIGTERM; returns the process exit code (0 after a clean stop).

    ``ssl``: (certificate file, key file) to serve HTTPS.
    """
    from indexing_task.spark import get_spark
    from overlord.coordinator.duties import Coordinator
    from overlord.supervisor.manager import Overlord

    ignore_working_directory()  # before Spark starts: its JVM and Python workers inherit it
    authenticator = authenticator_for(settings, insecure_open)
    secrets = SecretRegistry()
    install_log_filter(secrets)
    engine = metadata_engine(settings.database_url)
    spark = get_spark(settings.spark_master, settings.spark_conf, resident_slots=settings.resident_runner_count)
    overlord = Overlord(settings, engine, spark, before_publish=before_publish)
    coordinator = Coordinator(overlord)
    started, app = False, None
    try:
        overlord.start()
        started = True
        coordinator.start()
        drain_s = max(1, min(HTTP_DRAIN_S, int(shutdown_grace)))
        app = create_app(overlord, secrets, authenticator=authenticator, coordinator=coordinator)
        certfile, keyfile = ssl or (None, None)
        config = uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="off",
                                timeout_graceful_shutdown=drain_s, ssl_certfile=certfile, ssl_keyfile=keyfile)
        logger.info("overlord API on %s://%s:%d (console at /, API under /druid/indexer/v1)",
                    "https" if ssl else "http", host, port)
        logger.info("Host and Origin accepted: %s the address a connection arrives at (and the localhost names on "
                    "loopback)", f"OVERLORD_PUBLIC_URLS {', '.join(settings.public_urls)} and" if settings.public_urls
                    else "only")
        freeze_the_startup_heap()
        try:
            uvicorn.Server(config).run()
        except KeyboardInterrupt:
            pass  # uvicorn re-raises the signal that stopped it once it has stopped; we are shutting down anyway
        logger.info("HTTP server stopped; running tasks get %.0f s to publish", shutdown_grace)
    finally:
        if app is not None:
            app.state.queries.stop()
        if authenticator is not None:
            authenticator.close()
        coordinator.stop()
        if started:
            overlord.stop(shutdown_grace)
        spark.stop()
        engine.dispose()
    return 0
