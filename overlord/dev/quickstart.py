"""``overlord quickstart``: the running service on the embedded stack, until Ctrl-C.

Starts the broker and PostgreSQL, Spark and an overlord with its console, a producer that keeps
sending sample events stamped with the current time, and the example ``events`` supervisor;
prints the console's URL and a first query once the first task has published, then a status
line every ``status_every_s`` seconds. Ctrl-C (or SIGTERM) stops the producer, the overlord (its
running task may publish first) and the stack, and exits 0.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
import uvicorn
from fastapi import FastAPI
from rich.console import Console

from indexing_task.spark import get_spark
from overlord.coordinator.duties import Coordinator
from overlord.dev.sample_data import create_topic, produce_live
from overlord.dev.stack import dev_stack, free_port
from overlord.http.app import create_app
from overlord.query.engine import execute_sql
from overlord.query.formats import format_table
from overlord.query.local_engine import LocalEngine
from overlord.supervisor.manager import Overlord
from segment_store import committed_offsets
from segment_store.database import metadata_engine
from specs import load_example

__all__ = ["run_quickstart"]

PARTITIONS = 2
FIRST_QUERY = ('SELECT country, SUM("count") AS events, SUM(value_sum) AS "value" FROM events '
               "GROUP BY country ORDER BY events DESC")


def _port(wanted: int) -> int:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", wanted)) != 0:
            return wanted
    return free_port()


def _published(engine: sa.Engine, datasource: str) -> bool:
    stored = committed_offsets(engine, datasource)
    return stored is not None and sum(stored.offsets.values()) > 0


@contextmanager
def _serving(app: FastAPI, port: int) -> Iterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)
        app.state.queries.stop()  # the console's query engine, a process of its own


def run_quickstart(rate: int = 500, port: int = 8090, status_every_s: float = 10.0) -> int:
    """Run until interrupted; the exit code."""
    out = Console(highlight=False, soft_wrap=True)
    logging.getLogger().setLevel(logging.WARNING)  # the status lines below say what happens
    spec = load_example("events")
    topic = spec.spec.io_config.topic
    assert topic is not None  # the example names its topic
    stop = threading.Event()
    with out.status("starting Kafka (Tansu) and PostgreSQL…"), dev_stack() as stack:
        out.print(f"[green]✓[/] Kafka on {stack.bootstrap_servers}, PostgreSQL on {stack.database_url}")
        with out.status("starting Spark and the overlord…"):
            settings = stack.settings()
            engine = metadata_engine(stack.database_url)
            spark = get_spark("local[*]", resident_slots=settings.resident_runner_count)
            overlord = Overlord(settings, engine, spark)
            overlord.start()
            coordinator = Coordinator(overlord)
            coordinator.start()
        url = f"http://127.0.0.1:{_port(port)}/"
        producer = threading.Thread(target=produce_live, name="producer", daemon=True,
                                    args=(stack.bootstrap_servers, topic, PARTITIONS, rate, stop))
        try:
            create_topic(stack.bootstrap_servers, topic, PARTITIONS)
            producer.start()
            out.print(f"[green]✓[/] producing {rate} sample events/s to topic '{topic}'")
            overlord.submit(spec.to_druid_json())
            out.print(f"[green]✓[/] supervisor '{spec.datasource}' submitted (specs/examples/events.json)")
            app = create_app(overlord, authenticator=None, coordinator=coordinator)
            with _serving(app, int(url.rsplit(":", 1)[1].rstrip("/"))):
                out.print(f"[bold]console: {url}[/]  (open on loopback, no authentication; Ctrl-C stops everything)")
                with out.status("waiting for the first task to publish…"):
                    while not _published(engine, spec.datasource):
                        time.sleep(0.5)
                out.print("first query, over the published segments:\n" + FIRST_QUERY)
                out.print(format_table(execute_sql(spark, engine, FIRST_QUERY, local=LocalEngine.from_settings(
                    settings))), markup=False)
                while True:
                    time.sleep(status_every_s)
                    status = overlord.get(spec.datasource).status
                    out.print(f"{time.strftime('%H:%M:%S')} {status.state}: processed "
                              f"{status.counters.processed:,}, lag {sum(status.lag.values()):,} records, "
                              f"{status.counters.processed_per_second['1m']:,.0f} events/s (1 min)")
        except KeyboardInterrupt:
            out.print("\nstopping: producer, overlord, Spark, Kafka and PostgreSQL…")
        finally:
            stop.set()
            if producer.is_alive():  # its last flush goes to the broker before the broker stops
                producer.join(15)
            coordinator.stop()
            overlord.stop(grace_s=15)
            spark.stop()
            engine.dispose()
    out.print("stopped")
    return 0
