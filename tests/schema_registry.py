"""An in-process stand-in for Confluent Schema Registry: the REST subset confluent-kafka's client uses.

Schemas are kept as sent (Protobuf ones as the client's base64 descriptors, so ``format`` is ignored),
``normalize`` and ``deleted`` are accepted and ignored, and no compatibility is checked. Identical
schemas (text, type, references, metadata, rule set) share one id across subjects, as in the real one.
Subject associations are always none, so the client's serdes fall back to topic naming (``{topic}-value``).
"""

from __future__ import annotations

import base64
import gzip
import hmac
import json
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
Json = Any
Query = dict[str, list[str]]


class RegistryError(Exception):
    """An error answered with Confluent's body: ``{"error_code": ..., "message": ...}``."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


SCHEMA_NOT_FOUND = RegistryError(404, 40403, "Schema not found")


class Registry:
    """The registry's state, its HTTP server and the test controls (``outage``, ``requests``)."""

    def __init__(self, username: str | None = None, password: str | None = None) -> None:
        self.credentials = None if username is None else f"{username}:{password or ''}"
        self.outage = False  # True: every request is answered 503
        self.requests: Counter[str] = Counter()  # decoded path, no query -> requests (all, refused too)
        self.last_headers: dict[str, str] = {}  # the HTTP headers of the last request
        self.dropped: set[str] = set()  # paths whose requests get no answer: the connection is closed
        self.oversized: tuple[str, int] | None = None  # answers padded to this size: ("unframed" | "gzip", bytes)
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}  # canonical schema body -> id
        self._schemas: dict[int, dict[str, Json]] = {}  # id -> schema, schemaType, references, ...
        self._subjects: dict[str, list[int]] = {}  # subject -> ids, version n at index n - 1
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._routes = self._route_table()

    def start(self) -> Registry:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(self, method: str, path: str, query: Query, body: Json) -> Json:
        """The JSON body of a successful answer to one request; a RegistryError otherwise."""
        for verb, pattern, action in self._routes:
            match = re.fullmatch(pattern, path)
            if verb == method and match:
                with self._lock:
                    return action(*(unquote(group) for group in match.groups()), query, body)
        raise RegistryError(404, 404, "HTTP 404 Not Found")

    def _route_table(self) -> list[tuple[str, str, Callable[..., Json]]]:
        s, n = "([^/]+)", "([0-9]+)"
        return [
            ("POST", f"/subjects/{s}/versions", self._register),
            ("POST", f"/subjects/{s}", self._lookup),
            ("GET", "/schemas/types", lambda q, b: ["JSON", "PROTOBUF", "AVRO"]),
            ("GET", f"/schemas/ids/{n}", lambda i, q, b: self._schema(int(i))),
            ("GET", f"/schemas/ids/{n}/versions", lambda i, q, b: self._uses(int(i))),
            ("GET", f"/schemas/ids/{n}/subjects", lambda i, q, b: sorted({u["subject"] for u in self._uses(int(i))})),
            ("GET", "/subjects", lambda q, b: sorted(self._subjects)),
            ("GET", f"/subjects/{s}/versions", lambda sub, q, b: list(range(1, len(self._versions(sub)) + 1))),
            ("GET", f"/subjects/{s}/versions/{s}", self._version),
            ("GET", f"/associations/resources/{s}/{s}", lambda ns, name, q, b: []),  # none: topic naming
            ("GET", "/config", lambda q, b: {"compatibilityLevel": "BACKWARD"}),
            ("GET", f"/config/{s}", self._config),
        ]

    def _register(self, subject: str, query: Query, body: Json) -> Json:
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise RegistryError(422, 42201, "Invalid schema: a schema string is required")
        stored = {"schema": body["schema"], "schemaType": body.get("schemaType") or "AVRO",
                  "references": body.get("references") or []}
        stored |= {k: body[k] for k in ("metadata", "ruleSet") if body.get(k) is not None}
        if stored["schemaType"] in ("AVRO", "JSON"):
            try:
                json.loads(stored["schema"])
            except ValueError as error:
                raise RegistryError(422, 42201, f"Invalid schema: {error}") from None
        for ref in stored["references"]:
            try:
                self._version(ref["subject"], str(ref["version"]), {}, None)
            except (KeyError, RegistryError):
                raise RegistryError(422, 42201, f"Invalid schema: unresolvable reference {ref}") from None
        key = json.dumps(stored, sort_keys=True)
        schema_id = self._ids.setdefault(key, len(self._ids) + 1)
        self._schemas[schema_id] = stored
        versions = self._subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return {"id": schema_id}

    def _lookup(self, subject: str, query: Query, body: Json) -> Json:
        body = body if isinstance(body, dict) else {}
        versions = self._versions(subject)
        for version, schema_id in enumerate(versions, start=1):
            stored = self._schemas[schema_id]
            sent = (body.get("schema"), body.get("schemaType") or "AVRO", body.get("references") or [])
            if sent == (stored["schema"], stored["schemaType"], stored["references"]):
                return {"subject": subject, "version": version, "id": schema_id, **self._schema(schema_id)}
        raise SCHEMA_NOT_FOUND

    def _schema(self, schema_id: int) -> Json:
        if schema_id not in self._schemas:
            raise SCHEMA_NOT_FOUND
        stored = dict(self._schemas[schema_id])
        if stored["schemaType"] == "AVRO":
            del stored["schemaType"]
        return stored

    def _uses(self, schema_id: int) -> Json:
        self._schema(schema_id)
        return [{"subject": subject, "version": version} for subject, ids in sorted(self._subjects.items())
                for version, used in enumerate(ids, start=1) if used == schema_id]

    def _versions(self, subject: str) -> list[int]:
        if subject not in self._subjects:
            raise _subject_not_found(subject)
        return self._subjects[subject]

    def _version(self, subject: str, version: str, query: Query, body: Json) -> Json:
        versions = self._versions(subject)
        number = len(versions) if version in ("latest", "-1") else int(version) if version.isdigit() else None
        if number is None:
            raise RegistryError(422, 42202, f"The specified version '{version}' is not a valid version id.")
        if not 1 <= number <= len(versions):
            raise RegistryError(404, 40402, f"Version {version} not found.")
        schema_id = versions[number - 1]
        return {"subject": subject, "version": number, "id": schema_id, **self._schema(schema_id)}

    def _config(self, subject: str, query: Query, body: Json) -> Json:
        if query.get("defaultToGlobal") == ["true"]:
            return {"compatibilityLevel": "BACKWARD"}
        raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def _handler_for(registry: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """One HTTP/1.0 exchange (so nothing is served on a kept-alive connection after ``stop``)."""

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            with registry._lock:
                registry.requests[unquote(url.path)] += 1
                registry.last_headers = dict(self.headers.items())
            if unquote(url.path) in registry.dropped:
                self.close_connection = True
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                if registry.outage:
                    raise RegistryError(503, 50003, "Service unavailable (test outage)")
                if registry.credentials is not None and not self._authorized(registry.credentials):
                    raise RegistryError(401, 401, "Unauthorized")
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    raise RegistryError(400, 400, "Unrecognized JSON body") from None
                status, answer = 200, registry.answer(method, url.path.rstrip("/"), parse_qs(url.query), body)
            except RegistryError as error:
                status, answer = error.status, {"error_code": error.code, "message": error.message}
            except Exception as error:  # a bug here, answered as the real registry answers its own
                status, answer = 500, {"error_code": 50001, "message": f"{type(error).__name__}: {error}"}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            if registry.oversized is not None:  # JSON padded with spaces: no length, or gzip's small one
                framing, size = registry.oversized
                data = data.ljust(size)
                if framing == "gzip":
                    data = gzip.compress(data)
                    self.send_header("Content-Encoding", "gzip")
            if registry.oversized is None or registry.oversized[0] == "gzip":
                self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="SchemaRegistry"')
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self, credentials: str) -> bool:
            expected = "Basic " + base64.b64encode(credentials.encode()).decode()
            return hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def running_registry(username: str | None = None, password: str | None = None) -> Iterator[Registry]:
    """A started registry on 127.0.0.1 (a free port), stopped on exit."""
    registry = Registry(username, password).start()
    try:
        yield registry
    finally:
        registry.stop()
