"""A Confluent schema registry as a task reads it: confluent-kafka's client, its failures sorted.

An id or reference the registry does not have fails only the records that name it
(:class:`SchemaNotFound`); a registry that is down, answers 5xx or refuses the credentials fails
the task (:class:`SchemaRegistryUnavailable`), naming its URLs, never its credentials. Answers
are bounded by the bytes read (decoded); redirects are not followed (the client's default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient, SchemaRegistryError

from indexing_task.task_errors import SchemaRegistryUnavailable

__all__ = ["MAX_ANSWER_BYTES", "RegistrySchemas", "SchemaNotFound"]

MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a schema with its references; larger answers are refused
MAX_MISSING_IDS = 10_000  # ids the registry answered 404 for, remembered ...
MISSING_ID_TTL_S = 60.0  # ... this long (a replica that lags its primary may know an id a minute later)


class SchemaNotFound(ValueError):
    """The registry has no schema of this id (or no such reference): the record's problem, not the task's."""


class RegistrySchemas:
    """A schema registry client (confluent-kafka's), its failures sorted into the record's and the task's."""

    def __init__(self, decoder: dict[str, Any]) -> None:
        """``decoder``: a ``SchemaRegistrySpec.task_json()`` (checked and resolved when the task was built)."""
        self.urls, self.capacity = decoder["urls"], decoder["capacity"]
        auth = {"basic.auth.user.info": decoder["userInfo"]} if decoder.get("userInfo") else {}
        self.client = SchemaRegistryClient({"url": ",".join(self.urls), **auth, "cache.capacity": decoder["capacity"],
                                            "timeout": 10, "max.retries": 2, "retries.wait.ms": 250})
        session = self.client._rest_client.session  # noqa: SLF001 (the client has no option for headers)
        session.headers.update(decoder["headers"])
        session.event_hooks["response"].append(_bounded)
        self._missing: dict[int, float] = {}  # ids the registry answered 404 for -> when to ask again

    def schema(self, schema_id: int, kind: str) -> Any:
        """The registry's schema ``schema_id`` (cached by the client); unknown ids fail only their records."""
        if self._missing.get(schema_id, 0.0) > time.monotonic():  # a flood of bogus ids costs no round trips
            raise SchemaNotFound(f"schema id {schema_id} is not in the registry")
        try:
            return self._ask(lambda: self.client.get_schema(schema_id, fmt=_format(kind)))
        except SchemaNotFound:
            if len(self._missing) >= MAX_MISSING_IDS:
                self._missing.clear()
            self._missing[schema_id] = time.monotonic() + MISSING_ID_TTL_S
            raise SchemaNotFound(f"schema id {schema_id} is not in the registry") from None

    def version(self, subject: str, version: int, kind: str) -> Any:
        """A referenced schema (``subject``, ``version``)."""
        try:
            return self._ask(lambda: self.client.get_version(subject, version, fmt=_format(kind)).schema)
        except SchemaNotFound:
            raise SchemaNotFound(f"its reference {subject} version {version} is not in the registry") from None

    def _ask(self, request: Callable[[], Any]) -> Any:
        """``request``'s answer; :class:`SchemaNotFound` for a 404, :class:`SchemaRegistryUnavailable` otherwise."""
        where = f"schema registry {', '.join(self.urls)}"
        try:
            return request()
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise SchemaNotFound from None
            raise SchemaRegistryUnavailable(f"{where} answered {exc.http_status_code}: "
                                            f"{str(exc.error_message)[:200]}") from None
        except SchemaRegistryUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 (network errors of httpx and the like)
            raise SchemaRegistryUnavailable(f"{where} is unreachable: {type(exc).__name__}: {str(exc)[:200]}") from None


def _format(kind: str) -> str | None:
    """The registry's format of ``kind``'s schemas a task reads: Protobuf's as serialized descriptors."""
    return "serialized" if kind == "PROTOBUF" else None


def _bounded(response: Any) -> None:
    """Read the answer's body here, decoded, refusing it past the bound.

    Whatever its headers say: no length, or a small compressed body that inflates.
    """
    length = response.headers.get("content-length")
    if length is not None and int(length) > MAX_ANSWER_BYTES:
        raise SchemaRegistryUnavailable(f"schema registry answer of {int(length):,} bytes is larger than "
                                        f"{MAX_ANSWER_BYTES:,}")
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            response.close()
            raise SchemaRegistryUnavailable(f"schema registry answer is larger than {MAX_ANSWER_BYTES:,} bytes")
    response._content = bytes(body)  # noqa: SLF001 (httpx's read() keeps the body there; the client reads it)
