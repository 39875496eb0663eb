"""Service settings: environment variables ``OVERLORD_*`` (production) or keyword arguments (dev stack, tests).

Every setting is declared once here, with its variable, default and meaning; the
configuration table is generated from these declarations (:func:`settings_table`, checked by
a test).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from overlord.origins import parse_public_url
from segment_store.segment_cache import is_object_store

__all__ = ["Settings", "settings_table"]

ENV_PREFIX = "OVERLORD_"


class Settings(BaseSettings):
    """Where the overlord finds Kafka, PostgreSQL, deep storage and Spark, and its limits."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    secrets_dir: str | None = Field(
        default=None, description="a directory of files named after these variables, each holding one setting "
        "(e.g. `/run/secrets/OVERLORD_DATABASE_URL`): a setting whose variable is unset is read from its file, so "
        "passwords need not be in the environment (Docker and Kubernetes secrets)")
    database_url: str = Field(
        min_length=1, description="SQLAlchemy URL of the metadata store, e.g. "
        "`postgresql+psycopg://user:pw@db:5432/indexer`")
    deep_storage: str = Field(
        default="./deep-storage", description="segment root: a local directory (one every executor sees, "
        "on a cluster) or `s3://bucket/prefix` (s3fs; credentials, region and `AWS_ENDPOINT_URL` for S3-compatible "
        "stores from the overlord's usual `AWS_*` environment, which it hands to every executor)")
    kafka_bootstrap_servers: str | None = Field(
        default=None, description="Kafka brokers, used when a spec's `consumerProperties` has no "
        "`bootstrap.servers`")
    spark_master: str = Field(default="local[*]", description="`local[*]`, `spark://host:7077`, `k8s://...`, `yarn`")
    spark_conf: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="more Spark properties, as a JSON object: executor sizing "
        "(`spark.executor.memory`, `spark.cores.max`), the address executors reach the driver at "
        "(`spark.driver.host`), ... (see docs/operations.md, Spark cluster)")
    query_max_rows: int = Field(
        default=100_000, ge=1, description="the most rows a SQL result may have; a bigger one is refused with a "
        "400 (the result is built in the overlord's memory). Druid's `context.sqlOuterLimit` cuts a result to its "
        "first rows instead")
    query_timeout_ms: int = Field(
        default=300_000, ge=1, description="how long a SQL query may run (Druid's `context.timeout` lowers it "
        "per query, never raises it); past it its Spark jobs are cancelled and it gets a 400 naming the limit")
    query_max_bytes: int = Field(
        default=64 * 2**20, ge=1, description="the most bytes (Arrow, in memory) a SQL result may have; a bigger "
        "one is refused with a 400")
    query_local_max_bytes: int = Field(
        default=2**30, ge=0, description="queries whose segment files (after time pruning) total at most this many "
        "bytes run on DuckDB in the query engine's process, when DuckDB answers them exactly as Spark would (see "
        "docs/querying.md); the others on Spark. 0 sends every query to Spark")
    query_local_memory_limit: str = Field(
        default="2GB", pattern=r"^\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)$",
        description="the most memory DuckDB's queries may use together, e.g. `2GB`; a query that needs more "
        "runs on Spark")
    segment_cache_dir: str = Field(
        default="./segment-cache", description="where the query engine keeps local copies of segment files when "
        "deep storage is an object store, so queries (DuckDB's and Spark's) read local files instead of the object "
        "store (Druid's segment cache): filled as segments become visible and on first read, emptied as they are "
        "replaced or dropped, kept across restarts (see docs/querying.md, \"Segment cache\"); unused for local "
        "deep storage")
    segment_cache_max_bytes: int = Field(
        default=10 * 2**30, ge=0, description="the most bytes of segment copies the cache keeps (least recently "
        "used ones are evicted first); a query whose files do not fit reads the object store. 0 turns it off")
    query_max_length: int = Field(
        default=100_000, ge=1, description="the longest SQL text accepted (characters)")
    query_max_concurrent: int = Field(
        default=8, ge=1, description="how many queries (SQL and native) run at once in the query engine's "
        "process; the next ones wait for a turn (`OVERLORD_QUERY_QUEUE_TIMEOUT_MS`), at most twice as many as run: "
        "past that a query gets a 429 at once")
    query_queue_timeout_ms: int = Field(
        default=5_000, ge=0, description="how long a query waits for its turn when `OVERLORD_QUERY_MAX_CONCURRENT` "
        "queries run (within its own timeout) before it gets a 429; answers say how long they waited "
        "(`X-Overlord-Query-Queue-Ms`)")
    query_standby: bool = Field(
        default=True, description="keep a second query engine started ahead, which takes over at once when a "
        "query exhausts the engine or is killed at its deadline (instead of ~20 s of restart without SQL); it "
        "costs that engine's idle memory and CPU: 0.64 GB resident, 0.006 of a core, measured with the default "
        "heap (see docs/security.md)")
    query_engine_eager: bool = Field(
        default=True, description="start the query engine with the overlord, so that the first query does not wait "
        "~20 s for it; off, it starts at the first query (an overlord that only ingests never pays its memory)")
    query_spark_master: str | None = Field(
        default=None, description="the Spark master of the query engine's own Spark application (queries never "
        "run in ingestion's): a local Spark in the query engine's process if unset; a cluster's master runs "
        "queries there as a second application (give it `spark.cores.max` in `OVERLORD_QUERY_SPARK_CONF`, or it "
        "takes the cores ingestion needs)")
    query_spark_conf: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: {"spark.driver.memory": "1g"}, description="Spark properties of the query "
        "engine's application, as a JSON object (over `OVERLORD_SPARK_CONF` when `OVERLORD_QUERY_SPARK_MASTER` "
        "is set): its heap (`spark.driver.memory`) bounds what queries may use together")
    query_cpus: str | None = Field(
        default=None, description="the CPUs the query engine and its Spark JVM may run on, as Linux lists them "
        "(`1`, `2-3`, `0,2`): a hostile or heavy query then never takes CPU from ingestion and the API on the "
        "others. Unset: every CPU, at a lower priority than ingestion (see docs/security.md)")

    @property
    def segment_cache(self) -> str | None:
        """The segment cache's directory, if queries keep one: deep storage is an object store, the cache is on."""
        on = is_object_store(self.deep_storage) and self.segment_cache_max_bytes > 0
        return os.path.abspath(self.segment_cache_dir) if on else None

    @property
    def publishers_segment_cache(self) -> str | None:
        """The segment cache's directory for tasks whose workers run on this machine (a local Spark).

        Only while a query engine runs from the start (``query_engine_eager``) to take their copies.
        """
        return self.segment_cache if self.spark_master.startswith("local") and self.query_engine_eager else None

    @field_validator("query_cpus")
    @classmethod
    def _cpus_of_this_machine(cls, value: str | None) -> str | None:
        if value is not None:
            cpu_list(value)
        return value

    auth_file: str | None = Field(
        default=None, description="JSON file of users (argon2 password hashes) and bearer tokens (SHA-256 "
        "digests) with their roles, `read` or `write` (`overlord auth --help`); `overlord serve` refuses to start "
        "without it unless given `--insecure-open`")
    http_max_body_bytes: int = Field(
        default=1_048_576, ge=1, description="the largest HTTP request body accepted; a bigger one gets a 413")
    # --- HTTP hardening: the overlord's public URLs (Host allow-list, same-origin writes) ---
    public_urls: Annotated[tuple[str, ...] | None, NoDecode] = Field(
        default=None, description="comma-separated `http(s)://host[:port]` URLs browsers and clients reach the "
        "overlord at, e.g. `https://druid.example.com` behind a proxy: a request whose `Host` names none of them "
        "gets a 421 (but `/health`), a change whose `Origin` is none of them (scheme, host and port) a 403. "
        "The address a connection arrives at always counts (`http://127.0.0.1:8090`; when it is a loopback "
        "address also `localhost` and `[::1]` at that port)")

    @field_validator("public_urls", mode="before")
    @classmethod
    def _url_list(cls, value: Any) -> Any:
        """Comma-separated URLs from the environment (a sequence when given directly), each checked."""
        if value is None:
            return None
        urls = [u.strip() for u in value.split(",") if u.strip()] if isinstance(value, str) else list(value)
        for url in urls:
            parse_public_url(url)
        return tuple(urls) or None
    advertised_url: str | None = Field(
        default=None, description="this overlord's own `http(s)://host:port`, as the other overlords reach it: "
        "while it leads, standbys redirect Druid's supervisor, task and coordinator calls to it (307); without "
        "it they answer those calls with a 503 naming the leader")

    @field_validator("advertised_url")
    @classmethod
    def _one_url(cls, value: str | None) -> str | None:
        if value is not None:
            parse_public_url(value)
        return value

    task_slots: int = Field(
        default=8, ge=1, description="how many indexing tasks run at once on the shared Spark session; more wait "
        "for a slot (their `completionTimeout` starts when they run)")
    compaction_task_slots: int = Field(
        default=1, ge=1, description="how many compaction tasks (auto-compaction's and those asked for) run at "
        "once, besides the indexing tasks' slots (Druid's `maxCompactionTaskSlots`): a pass over many datasources "
        "works through them in turn and never holds up ingestion")
    compaction_period_s: int = Field(
        default=60, ge=0, description="how often the leader runs auto-compaction: merges a fresh interval's small "
        "segments tier by tier and compacts older intervals whole (see docs/querying.md, \"Good files by default\"); "
        "0 turns it off")
    auto_compaction: bool = Field(
        default=True, description="compact every supervisor's datasource with the default config (intervals an "
        "hour older than the newest compacted whole) unless it has its own "
        "(`POST /druid/coordinator/v1/config/compaction`); false compacts only the datasources that have one")
    retention_period_s: int = Field(
        default=60, ge=0, description="how often the leader applies the retention rules "
        "(`/druid/coordinator/v1/rules`): segments a drop rule matches are marked unused; 0 turns it off")
    kill_period_s: int = Field(
        default=600, ge=0, description="how often the leader deletes the rows and files of segments unused for "
        "`OVERLORD_KILL_UNUSED_AFTER_S` (replaced ones: `OVERLORD_KILL_REPLACED_AFTER_S`) and orphan files as old "
        "as the former (what `overlord cleanup` does); 0 turns it off")
    kill_unused_after_s: int = Field(
        default=86400, ge=0, description="how long a dropped segment (and an orphan file) is kept before it is "
        "deleted: it can be marked used again until then")
    kill_replaced_after_s: int = Field(
        default=1800, ge=0, description="how long a segment replaced by a newer version of its interval (a "
        "compaction's inputs) is kept before it is deleted: a query planned before the swap may still read it, so "
        "keep it well above `OVERLORD_QUERY_TIMEOUT_MS`")
    kill_backup_window_s: int = Field(
        default=3 * 86400, ge=0, description="the oldest metadata backup a restore may bring back: the kill duty "
        "keeps the files of every segment unused for less than this (dropped or replaced), so each row of such a "
        "backup still finds its files (docs/operations.md, \"Backup and restore\"); 0 keeps no more than the two "
        "settings above")
    task_retention_s: int = Field(
        default=7 * 86400, ge=0, description="how long the rows of finished tasks (with their reports and logs) "
        "are kept: the kill duty deletes older ones (not `reset_offsets` rows, the record of offsets moved); "
        "0 keeps every task")
    iceberg_period_s: int = Field(
        default=60, ge=0, description="how often the leader commits an Apache Iceberg snapshot of each datasource "
        "whose visible segments changed (catalog `overlord`, namespace `druid` in the metadata PostgreSQL; see "
        "docs/querying.md, \"Open tables\"); 0 turns the export off. Each commit has a fixed cost (~30-80 ms of "
        "the overlord's CPU, growing with the snapshots kept): at 10 s, 20 trickling datasources spent 0.11 core "
        "on it")
    iceberg_snapshot_retention_s: int = Field(
        default=600, ge=0, description="how long an Iceberg snapshot stays readable after a newer one: older ones "
        "expire, and cleanup keeps every file a live snapshot references")
    resident_runners: int | None = Field(
        default=None, ge=0, description="long-lived Spark tasks that index small tasks (under 50k records) without "
        "a Spark job each: a trickle then costs a fraction of the CPU. Each holds one Spark task slot: a local "
        "master gets that many slots more, a cluster gives each one of its executor cores for good (keep more cores "
        "than runners, or its Spark jobs wait forever). 0 runs every task as a Spark job. Default: 2 with a "
        "`local` master (a task waits for a runner that is busy with others, so two keep a slow broker round trip "
        "from holding every supervisor up), 0 with a cluster")

    @property
    def resident_runner_count(self) -> int:
        """``resident_runners``, or its default for the Spark master."""
        if self.resident_runners is not None:
            return self.resident_runners
        return 2 if self.spark_master.startswith("local") else 0
    task_max_records: int = Field(
        default=5_000_000, ge=1, description="the most offsets one indexing task reads: a backlog is worked off "
        "by a sequence of tasks, each well inside `completionTimeout`")
    task_min_interval_s: float = Field(
        default=1.5, ge=0, description="the least time between two launches of a task group's tasks while its "
        "topic trickles: a steady stream is indexed in tasks of this many seconds' records (each task has a fixed "
        "cost), not one per fraction of a second; a task that can fill up to `OVERLORD_TASK_MAX_RECORDS`, or "
        "hold `OVERLORD_TASK_TARGET_RECORDS`, starts at once. 0 launches as soon as records wait")
    task_target_records: int = Field(
        default=250, ge=0, description="the records that make a task worth its fixed cost: a task group whose "
        "topic brings this many sooner than `OVERLORD_TASK_MIN_INTERVAL_S` launches as soon as they are there "
        "(at 500 events/s every 0.5 s; a trickle still waits the interval), so a busy topic's records wait less. "
        "0 waits the interval whatever the rate")

    @field_validator("spark_conf", "query_spark_conf", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        """A JSON text from the environment (a dict when given directly)."""
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON object such as {{\"spark.executor.memory\": \"4g\"}}: {exc}") from None

    @classmethod
    def from_env(cls) -> Settings:
        """The settings from the environment; exits with a message naming the variable if one is bad."""
        try:
            secrets_dir = os.environ.get(f"{ENV_PREFIX}SECRETS_DIR")
            if secrets_dir is not None and not os.path.isdir(secrets_dir):
                raise SystemExit(f"invalid settings: {ENV_PREFIX}SECRETS_DIR: {secrets_dir} is not a directory")
            return cls(_secrets_dir=secrets_dir)  # type: ignore[call-arg]  # the rest come from the environment
        except ValidationError as exc:
            problems = "; ".join(f"{ENV_PREFIX}{str(e['loc'][0]).upper()}: {_message(e)}" for e in exc.errors())
            raise SystemExit(f"invalid settings: {problems} (`overlord dev up` prints the settings of an "
                             "embedded stack)") from None


def cpu_list(text: str) -> set[int]:
    """The CPUs a Linux CPU list names (``1``, ``2-3``, ``0,2``); a ValueError unless this process may use them all."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise ValueError(f"expected a CPU list such as `1` or `2-3,5`, got {text!r}") from None
    usable = os.sched_getaffinity(0)
    if not cpus or not cpus <= usable:
        raise ValueError(f"{text!r} names CPUs this machine does not give the overlord (it may use "
                         f"{','.join(map(str, sorted(usable)))})")
    return cpus


def _message(error: object) -> str:
    kind, msg = error["type"], error["msg"]  # type: ignore[index]
    return "is not set" if kind == "missing" else str(msg).lower()


def settings_table() -> str:
    """The configuration table of docs/configuration.md (Markdown), from the declarations above."""
    rows = ["| variable | meaning | default |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        value = None if field.is_required() else field.get_default(call_default_factory=True)
        default = "required" if field.is_required() else ("none" if value is None else f"`{value}`")
        rows.append(f"| `{ENV_PREFIX}{name.upper()}` | {field.description} | {default} |")
    return "\n".join(rows)
