"""The peer a Python user would pick: the same job written with Quix Streams.

Consume the topic, re-key by the dimension set (``group_by``, which goes through a
repartition topic, as Quix Streams requires for a multi-partition topic), aggregate each
key over 1-minute tumbling windows (count, sum, min, max of ``value``) and write the
closed windows to Parquet with Quix's own file sink. Window state lives in RocksDB with
changelog topics (Quix's defaults), in ``at-least-once`` or ``exactly-once`` mode.

Windows close by event time: a window is emitted once its partition has seen an event
past the window's end plus the grace period. The grace period is the whole hour of data,
so no record is ever late however the consumer interleaves partitions; every window stays
open until the app has processed every record. Then, while the app keeps running, the
benchmark appends a few closing events two hours past the data (tagged with the run, so a
later run ignores them), and the app closes and writes every window. The rate counts the
processing of the records and of the closing (first record processed -> all data
processed, first closing event processed -> final checkpoint), not the group join or the
wait for the closing events to be produced. (Restarting the app for the closing step fails
on the embedded broker: its wrong high watermark makes Quix reject its own changelog.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from benchmarks.suite.shapes import HOUR_MS, Shape, generate
from benchmarks.suite.topics import produce
from indexing_task.spark_worker import cyclic_gc_paused

__all__ = ["Guarantee", "QuixRun", "quix_source", "run_quix"]

Guarantee = Literal["at-least-once", "exactly-once"]
SEP = "\x1f"
CLOSING_EVENTS = 64
"""Closing events with 64 random keys reach every repartition partition (checked by the comparison)."""


@dataclass
class QuixRun:
    guarantee: str
    events: int
    out_dir: Path
    startup_seconds: float = 0.0
    process_seconds: float = 0.0
    close_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.events / (self.process_seconds + self.close_seconds)


class _Progress:
    """Watches the records the window stage processed (from the repartition topic).

    After ``events`` records it starts producing the closing events; after those too, it
    stops the app (which then writes its last checkpoint and sink batch).
    """

    def __init__(self, input_topic: str, events: int, close: Callable[[], None]) -> None:
        self.input_topic = input_topic
        self.events = events
        self.close = close
        self.done = 0
        self.marks: dict[str, float] = {}
        self.app: Any = None
        self.closer: threading.Thread | None = None

    def __call__(self, topic: str, _partition: int, _offset: int) -> None:
        self.marks.setdefault("first", time.monotonic())
        if topic == self.input_topic:
            return
        self.done += 1
        if self.done == self.events:
            self.marks["data_done"] = time.monotonic()
            self.closer = threading.Thread(target=self.close, daemon=True)
            self.closer.start()
        elif self.done == self.events + 1:
            self.marks["closing_first"] = time.monotonic()
        elif self.done >= self.events + CLOSING_EVENTS and self.app is not None:
            self.app.stop()


def _build(bootstrap: str, topic: str, shape: Shape, guarantee: Guarantee, workdir: Path, group: str,
           progress: _Progress) -> Any:
    from quixstreams import Application
    from quixstreams.dataframe.windows import Count, Max, Min, Sum
    from quixstreams.sinks.community.file.formats import ParquetFormat
    from quixstreams.sinks.community.file.local import LocalFileSink

    dims = shape.dimensions
    app = Application(
        broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
        processing_guarantee=guarantee, state_dir=str(workdir / "state"), loglevel=logging.WARNING,
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        on_message_processed=progress)
    source = app.topic(topic, value_deserializer="json",
                       timestamp_extractor=lambda value, _headers, _ts, _type: int(value["ts"]))
    sdf = app.dataframe(source)
    sdf = sdf.filter(lambda v: v.get("closing", guarantee) == guarantee)  # another run's closing events
    sdf = sdf.group_by(lambda v: SEP.join(str(v[d]) for d in dims), name="dims")
    windows = sdf.tumbling_window(timedelta(minutes=1), grace_ms=HOUR_MS).agg(
        count=Count(), value_sum=Sum("value"), value_min=Min("value"), value_max=Max("value"))
    sdf = windows.final(closing_strategy="partition")
    sdf = sdf.apply(lambda value, key, _ts, _headers: {**value, "dims": key}, metadata=True)
    sdf.sink(LocalFileSink(directory=str(workdir / "out"), format=ParquetFormat(compression="zstd")))
    progress.app = app
    return app


def run_quix(bootstrap: str, topic: str, shape: Shape, events: int, partitions: int, guarantee: Guarantee,
             workdir: Path) -> QuixRun:
    """Run the Quix job over the topic's first ``events`` records and close all their windows."""
    workdir.mkdir(parents=True, exist_ok=True)

    def close() -> None:
        closing = generate(shape, CLOSING_EVENTS, seed=99, offset_ms=2 * HOUR_MS)
        tagged = [v[:-1] + b',"closing":"' + guarantee.encode() + b'"}' for v in closing]
        produce(bootstrap, topic, tagged, partitions)

    progress = _Progress(topic, events, close)
    group = f"quix-{guarantee}-{topic}"
    started = time.monotonic()
    app = _build(bootstrap, topic, shape, guarantee, workdir, group, progress)
    with cyclic_gc_paused():  # as every system in the suite runs: the cyclic collector costs a lot here
        app.run()
    ended = time.monotonic()
    if progress.closer is not None:
        progress.closer.join(timeout=30)
    marks = progress.marks
    if progress.done < events + CLOSING_EVENTS or "closing_first" not in marks:
        raise RuntimeError(f"quix {guarantee}: the window stage processed {progress.done} records, "
                           f"expected {events} + {CLOSING_EVENTS} closing events")
    return QuixRun(guarantee, events, workdir / "out", startup_seconds=marks["first"] - started,
                   process_seconds=marks["data_done"] - marks["first"],
                   close_seconds=ended - marks["closing_first"])


def quix_source(run: QuixRun, shape: Shape) -> str:
    """A query over the windows Quix wrote, in the comparison's columns (see benchmarks.aggregates)."""
    files = sorted(str(p) for p in run.out_dir.rglob("*.parquet"))
    if not files:
        raise RuntimeError(f"quix {run.guarantee} wrote no Parquet files under {run.out_dir}")
    split = ", ".join(f"split_part(dims, '{SEP}', {i + 1}) AS \"{d}\"" for i, d in enumerate(shape.dimensions))
    return (f'SELECT "start" AS minute_ms, {split}, "count" AS cnt, value_sum AS vsum, '
            f"value_min AS vmin, value_max AS vmax FROM read_parquet({files!r})")
