"""A Confluent schema registry, as Druid's ``schema_registry`` decoders name it: where writer schemas come from.

The registry is a server the overlord's tasks call on a user's behalf, so the operator allows its
base URLs (``OVERLORD_ALLOWED_SCHEMA_REGISTRIES``: comma-separated URLs, each exact or, ending in
``/``, a prefix); unset, no spec may name a registry. Only ``http``/``https`` URLs without
credentials in them; credentials go in ``config`` (``basic.auth.user.info``), masked in every answer
like Kafka passwords, or come from the overlord's environment through Druid's
``druid.dynamic.config.provider`` (``environment``; ``mapString`` gives values inline, as Druid's
documented headers do). TLS uses the trust store of the overlord's image: ``config``'s
file options (trust and key stores) would read server files, and are refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from specs.consumer_properties import DYNAMIC_CONFIG_PROVIDER, SECRET_ENV_PREFIX
from specs.data_schema import SpecModel
from specs.spec_errors import SpecError, join_path, key_path

__all__ = ["ALLOWED_REGISTRIES_VARIABLE", "SchemaRegistrySpec", "registry_allowed"]

ALLOWED_REGISTRIES_VARIABLE = "OVERLORD_ALLOWED_SCHEMA_REGISTRIES"
"""Environment variable: the registry URLs specs may name (exact, or prefixes ending in ``/``)."""

MAX_URLS = 10
MAX_CAPACITY = 10_000  # schemas one task process keeps; a topic rarely has more than a few dozen versions
MAX_HEADERS = 50
_URL = re.compile(r"https?://[a-z0-9.\-]+(?::[0-9]{1,5})?(?:/[a-z0-9._~/-]*)?", re.IGNORECASE)
"""A registry URL: no credentials, query, fragment, percent-escapes or separators (the client splits ``url`` on
commas: ``http://allowed/x,http://other`` would add a host)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}")
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
                               "te", "trailer", "proxy-authorization", "proxy-connection"})
"""Headers that say where or how a request goes, not what it carries: a spec may not set them."""
_USER_INFO = ("basic.auth.user.info", "schema.registry.basic.auth.user.info")
_SOURCE = ("basic.auth.credentials.source", "schema.registry.basic.auth.credentials.source")
_PROVIDER_CONFIG_KEYS = frozenset(_USER_INFO)  # what the environment provider may fill in ``config``


def registry_allowed(url: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the operator allows ``url`` (``OVERLORD_ALLOWED_SCHEMA_REGISTRIES``)."""
    env = os.environ if environ is None else environ
    entries = [entry.strip() for entry in env.get(ALLOWED_REGISTRIES_VARIABLE, "").split(",") if entry.strip()]
    base = url.rstrip("/")
    return any(base == entry.rstrip("/") or (entry.endswith("/") and url.startswith(entry)) for entry in entries)


class SchemaRegistrySpec(SpecModel):
    """Druid's ``schema_registry`` decoder: writer schemas fetched by the id each value carries, then cached."""

    type: Literal["schema_registry"]
    """Decoder type."""
    url: str | None = None
    """The registry's URL (or ``urls``)."""
    urls: tuple[str, ...] = Field(default=(), strict=False)
    """Several URLs of one registry, tried in turn."""
    capacity: int | None = None
    """The most schemas a task keeps (default and limit: 10,000)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Client settings: ``basic.auth.credentials.source`` (USER_INFO), ``basic.auth.user.info`` (``user:password``)."""
    headers: dict[str, Any] = Field(default_factory=dict)
    """HTTP headers sent with every registry request."""

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= MAX_CAPACITY:
            raise SpecError.at("", f"expected 1 to {MAX_CAPACITY}, got {value}")
        return value

    @model_validator(mode="after")
    def _checked(self) -> SchemaRegistrySpec:
        errors = [*self._url_errors(), *_config_errors(self.config), *_header_errors(self.headers)]
        if errors:
            raise SpecError(errors)
        return self

    @property
    def all_urls(self) -> tuple[str, ...]:
        """``url`` and ``urls``, in order, without repeats."""
        return tuple(dict.fromkeys([*([self.url] if self.url else []), *self.urls]))

    def task_json(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """What a task needs: URLs, cache capacity, credentials and headers, the environment's secrets read now.

        :class:`SpecError` names an environment variable the provider names that is not set.
        """
        env = os.environ if environ is None else environ
        errors: list[tuple[str, str]] = []

        def resolve(values: Mapping[str, Any], where: str) -> dict[str, str]:
            out = {k: str(v) for k, v in values.items() if k != DYNAMIC_CONFIG_PROVIDER}
            provider = values.get(DYNAMIC_CONFIG_PROVIDER) or {}
            out.update(provider.get("config", {}))  # mapString: the values themselves
            for key, variable in provider.get("variables", {}).items():
                if variable in env:
                    out[key] = env[variable]
                else:
                    errors.append((join_path(where, key_path(DYNAMIC_CONFIG_PROVIDER)),
                                   f"environment variable {variable} is not set"))
            return out

        config, headers = resolve(self.config, "config"), resolve(self.headers, "headers")
        if errors:
            raise SpecError(errors)
        user_info = next((config[k] for k in _USER_INFO if k in config), None)
        return {"type": "schema_registry", "urls": list(self.all_urls), "capacity": self.capacity or MAX_CAPACITY,
                "userInfo": user_info, "headers": headers}

    def _url_errors(self) -> list[tuple[str, str]]:
        if not self.all_urls:
            return [("url", "required: the schema registry's URL (or urls)")]
        if len(self.urls) > MAX_URLS:
            return [("urls", f"at most {MAX_URLS} URLs, got {len(self.urls)}")]
        errors = []
        for path, url in [("url", self.url), *((f"urls[{i}]", u) for i, u in enumerate(self.urls))]:
            if url is None:
                continue
            if len(url) > 2048 or not _URL.fullmatch(url) or ".." in url:
                errors.append((path, "expected an http:// or https:// URL without credentials, query or fragment "
                                     f"(credentials go in config.basic.auth.user.info), got {url[:80]!r}"))
            elif not registry_allowed(url):
                errors.append((path, f"{url} is not an allowed schema registry: the operator lists the registries "
                                     f"specs may use in {ALLOWED_REGISTRIES_VARIABLE}"))
        return errors


def _config_errors(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    for key, value in config.items():
        path = join_path("config", key_path(key))
        if key == DYNAMIC_CONFIG_PROVIDER:
            errors += [(join_path(path, p), m) for p, m in _provider_errors(value, _PROVIDER_CONFIG_KEYS)]
        elif key in _SOURCE:
            if value != "USER_INFO":
                errors.append((path, f"only USER_INFO (credentials from basic.auth.user.info), got {value!r}"))
        elif key in _USER_INFO:
            if not isinstance(value, str) or ":" not in value or len(value) > 1024 or _CONTROL.search(value):
                errors.append((path, "expected user:password, at most 1,024 characters (the value is not shown)"))
        elif "ssl" in key:
            errors.append((path, "TLS files on the server are not read: use an https URL, whose certificate the "
                                 "overlord's trust store (SSL_CERT_FILE) verifies"))
        else:
            errors.append((path, "not a setting this service passes to the registry client: "
                                 "basic.auth.credentials.source, basic.auth.user.info, druid.dynamic.config.provider"))
    return errors


def _header_errors(headers: Mapping[str, Any]) -> list[tuple[str, str]]:
    if len(headers) > MAX_HEADERS:
        return [("headers", f"at most {MAX_HEADERS} headers, got {len(headers)}")]
    errors: list[tuple[str, str]] = []
    for name, value in headers.items():
        if name == DYNAMIC_CONFIG_PROVIDER:
            path = join_path("headers", key_path(name))
            errors += [(join_path(path, p), m) for p, m in _provider_errors(value, None)]
        else:
            errors += [(join_path("headers", p), m) for p, m in _header_problems({name: value})]
    return errors


def _header_problems(headers: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Problems of header names and values (given directly or through a ``mapString`` provider)."""
    errors: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            errors.append((key_path(name), "not an HTTP header name"))
        elif name.lower() in _RESERVED_HEADERS:
            errors.append((key_path(name), "a header that routes the request; a spec may not set it"))
        elif not isinstance(value, str) or len(value) > 4096 or _CONTROL.search(value):
            errors.append((key_path(name), "expected text of at most 4,096 characters without control characters"))
    return errors


def _provider_errors(provider: Any, keys: frozenset[str] | None) -> list[tuple[str, str]]:
    """Problems of a ``druid.dynamic.config.provider`` filling ``keys`` (None: any).

    Druid's ``environment`` (variables ``OVERLORD_SECRET_*`` only) or ``mapString`` (the values in its ``config``).
    """
    kind = provider.get("type") if isinstance(provider, Mapping) else None
    field = {"environment": "variables", "mapString": "config"}.get(str(kind))
    if field is None or set(provider) - {"type", field} or not isinstance(provider.get(field), Mapping):
        return [("", 'expected {"type": "environment", "variables": {"<key>": "OVERLORD_SECRET_..."}} or '
                     '{"type": "mapString", "config": {"<key>": "<value>"}}')]
    errors = []
    for key, value in provider[field].items():
        path = join_path(field, key_path(key))
        if keys is not None and key not in keys:
            errors.append((path, f"only {', '.join(sorted(keys))} may come from a provider"))
        elif keys is None and (named := _header_problems({key: ""})):  # a header's name, whatever its value
            errors.append((path, named[0][1]))
        elif not isinstance(value, str) or len(value) > 4096 or _CONTROL.search(value):
            errors.append((path, "expected text of at most 4,096 characters without control characters"))
        elif kind == "environment" and not value.startswith(SECRET_ENV_PREFIX):
            errors.append((path, f"expected the name of an environment variable starting with {SECRET_ENV_PREFIX}"))
    return errors
