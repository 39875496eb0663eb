"""Service settings, read from the environment (production) or handed over by the dev stack."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """Where the overlord finds Kafka, PostgreSQL, deep storage and Spark.

    ``kafka_bootstrap_servers`` is used when a spec's consumerProperties has no
    ``bootstrap.servers`` of its own.
    """

    database_url: str
    deep_storage: str = "./deep-storage"
    kafka_bootstrap_servers: str | None = None
    spark_master: str = "local[*]"
    query_max_rows: int = 100_000
    """The most rows a SQL result may have (a bigger one gets a 400 naming the limit)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        url = env.get("OVERLORD_DATABASE_URL")
        if not url:
            raise SystemExit("OVERLORD_DATABASE_URL is not set (e.g. postgresql+psycopg://user:pw@host/db); "
                             "`overlord dev up` prints the settings of an embedded stack")
        return cls(
            database_url=url,
            deep_storage=env.get("OVERLORD_DEEP_STORAGE", cls.deep_storage),
            kafka_bootstrap_servers=env.get("OVERLORD_KAFKA_BOOTSTRAP_SERVERS"),
            spark_master=env.get("OVERLORD_SPARK_MASTER", cls.spark_master),
            query_max_rows=_positive_int(env, "OVERLORD_QUERY_MAX_ROWS", cls.query_max_rows),
        )


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SystemExit(f"{name} must be a positive integer, got {text!r}")
    return value
