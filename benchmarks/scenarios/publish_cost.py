"""What the publish transaction costs the calling process's CPU: per publish, alone and in group-commit rounds.

The overlord's task threads and its group commit share one Python interpreter, so the CPU the
publish spends in this process (statement building, drivers, row decoding) is what caps how many
tasks an overlord keeps up with. On an embedded PostgreSQL (its own processes, not counted), this
publishes ``--publishes`` realistic requests of quiet topics' tasks (one segment of the current
hour, two partitions, topic IDs and leader epoch checked, the file checked in local deep storage):

- ``alone``: one request per transaction (:func:`segment_store.publish.publish`);
- ``rounds``: ``--round`` requests of different datasources per transaction (:func:`publish_many`).

and reports ``time.process_time`` of this process per publish and per transaction (the best of
``--repeats`` passes, and their median). ``--profile`` prints cProfile's top functions of one pass.

    python -m benchmarks.scenarios.publish_cost
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.results_file import parse_args, save_results
from overlord.dev.stack import EmbeddedPostgres
from segment_store import DeepStorage, Offsets, PublishRequest, SegmentDescriptor, pin_offsets, upgrade_schema
from segment_store.database import metadata_engine
from segment_store.leadership import claim_leadership
from segment_store.offsets import Partition
from segment_store.publish import publish, publish_many

HOUR = datetime(2026, 1, 1, 10, tzinfo=UTC)
PARTITIONS = (0, 1)
COLUMNS = {"metrics": [{"type": "count", "name": "count"}, {"type": "longSum", "name": "bytes", "fieldName": "bytes"}],
           "dimensions": [{"type": "string", "name": name} for name in ("page", "user", "country", "device")]}
"""What a segment records of its spec (:func:`indexing_task.published_columns.recorded_columns`): a small schema."""


class Datasource:
    """A quiet topic's datasource: its committed offsets as the next task starts from them."""

    def __init__(self, name: str, storage: DeepStorage, leader_epoch: int) -> None:
        self.name, self.storage, self.leader_epoch = name, storage, leader_epoch
        self.offsets = {p: 0 for p in PARTITIONS}
        self.topic_ids: dict[Partition, str] = {p: f"id-{name}" for p in PARTITIONS}

    def next_request(self) -> PublishRequest:
        """The next task's request: a few records on each partition, one segment whose file exists."""
        start = dict(self.offsets)
        end = {p: o + 3 for p, o in start.items()}
        attempt = uuid.uuid4().hex[:12]
        path = self.storage.path_for(self.name, HOUR, HOUR + timedelta(hours=1), attempt, 0)
        self.storage.makedirs_for(path)
        Path(path).touch()
        segment = SegmentDescriptor(
            id=f"{self.name}_{HOUR.isoformat()}_{attempt}", datasource=self.name, interval_start=HOUR,
            interval_end=HOUR + timedelta(hours=1), path=path, size_bytes=4096, num_rows=6,
            details={"min_time": HOUR.isoformat(), "max_time": (HOUR + timedelta(minutes=59)).isoformat(),
                     "columns": COLUMNS})
        self.offsets = end
        return PublishRequest(datasource=self.name, topic=f"topic-{self.name}", task_id=f"index_{attempt}",
                              start_offsets=Offsets(start), end_offsets=Offsets(end), segments=(segment,),
                              leader_epoch=self.leader_epoch, topic_ids=self.topic_ids)


def _cpu_ms(run: Callable[[], None]) -> tuple[float, float]:
    """The CPU (this process) and wall milliseconds ``run`` takes."""
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000


def _pass(engine: sa.Engine, sources: list[Datasource], publishes: int, per_round: int) -> tuple[float, float]:
    """CPU and wall ms of ``publishes`` requests, ``per_round`` of different datasources per transaction."""
    rounds = [[sources[(i + j) % len(sources)] for j in range(per_round)]
              for i in range(0, publishes, per_round)]
    batches = [[(source.next_request(), source.storage) for source in chosen] for chosen in rounds]

    def run() -> None:
        for batch in batches:
            outcomes = (publish_many(engine, batch) if per_round > 1
                        else [publish(engine, batch[0][0], batch[0][1])])
            if not all(outcome.ok for outcome in outcomes):
                raise RuntimeError(f"a publish was refused: {[o.message for o in outcomes if not o.ok]}")

    return _cpu_ms(run)


def run(publishes: int, per_round: int, repeats: int, datasources: int, profile: bool) -> dict[str, Any]:
    started = datetime.now(UTC).isoformat()
    with tempfile.TemporaryDirectory(prefix="publish-cost-") as workdir:
        Path(workdir).chmod(0o755)  # as root PostgreSQL runs as `nobody` (see EmbeddedPostgres)
        postgres = EmbeddedPostgres(Path(workdir) / "pg")
        postgres.start()
        engine = metadata_engine(postgres.url)
        try:
            upgrade_schema(engine)
            with engine.begin() as conn:
                leader_epoch = claim_leadership(conn, "publish-cost")
            storage = DeepStorage(str(Path(workdir) / "deep"))
            sources = [Datasource(f"ds_{n:03d}", storage, leader_epoch) for n in range(datasources)]
            for source in sources:
                pin_offsets(engine, source.name, f"topic-{source.name}", Offsets(source.offsets))
            _pass(engine, sources, len(sources), 1)  # warm-up: topic IDs recorded, pool and caches filled
            results: dict[str, Any] = {}
            for mode, size in (("alone", 1), ("rounds", per_round)):
                passes = [_pass(engine, sources, publishes, size) for _ in range(repeats)]
                cpu = [c / publishes for c, _ in passes]
                wall = [w / publishes for _, w in passes]
                results[mode] = {
                    "requests_per_transaction": size,
                    "cpu_ms_per_publish": round(min(cpu), 3),
                    "cpu_ms_per_publish_median": round(statistics.median(cpu), 3),
                    "cpu_ms_per_transaction": round(min(cpu) * size, 3),
                    "wall_ms_per_publish": round(min(wall), 3)}
                print(f"{mode}: {results[mode]}", flush=True)
            if profile:
                profiler = cProfile.Profile(time.process_time)  # CPU, not the waits on the server
                profiler.runcall(_pass, engine, sources, publishes, per_round)
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
                pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        finally:
            engine.dispose()
            postgres.stop()
    return {"benchmark": "publish_cost", "started": started, "publishes_per_pass": publishes,
            "repeats": repeats, "datasources": datasources, "partitions": len(PARTITIONS), **results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=300, help="requests published per pass")
    parser.add_argument("--round", type=int, default=3, help="requests per transaction in the rounds mode")
    parser.add_argument("--repeats", type=int, default=5, help="passes per mode (the best and the median reported)")
    parser.add_argument("--datasources", type=int, default=30, help="datasources the requests rotate through")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of a rounds pass")
    parser.add_argument("--out", default="publish_cost.json", help="results file under benchmarks/results, or a path")
    args = parse_args(parser, {"publishes": 12, "repeats": 1, "datasources": 6})
    save_results(run(args.publishes, args.round, args.repeats, args.datasources, args.profile), args.out, args.smoke)


if __name__ == "__main__":
    main()
