"""Log lines as text (the default) or as JSON objects, one per line, for log pipelines.

``overlord --log-format json ...`` sets it for the process; the query engine's process follows
its overlord (:func:`log_format` is handed to it), and the Spark JVMs they start log JSON too
(log4j2's JsonLayout, through ``SPARK_SUBMIT_OPTS``). Secrets are scrubbed before a line is
formatted either way (:class:`overlord.http.redact.SecretLogFilter` is a handler filter).
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

__all__ = ["LogFormat", "JsonLines", "configure_logging", "log_format"]

LogFormat = Literal["text", "json"]

_LOG4J2_JSON = Path(__file__).with_name("log4j2-json.properties")


class JsonLines(logging.Formatter):
    """``{"time", "level", "logger", "message"}`` (and ``"exception"``), one JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: int, form: LogFormat = "text", process: str = "") -> None:
    """One stderr handler on the root logger, in ``form``; ``process`` names the process in text lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if form == "json" else logging.Formatter(
        f"%(asctime)s %(levelname)s {process + ' ' if process else ''}%(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if form == "json":  # read by spark-submit when pyspark starts the driver's JVM (the query engine's too)
        options = os.environ.get("SPARK_SUBMIT_OPTS", "")
        os.environ["SPARK_SUBMIT_OPTS"] = f"{options} -Dlog4j2.configurationFile={_LOG4J2_JSON}".strip()


def log_format() -> LogFormat:
    """The form this process's root logger writes in."""
    return "json" if any(isinstance(h.formatter, JsonLines) for h in logging.getLogger().handlers) else "text"
