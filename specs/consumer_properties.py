"""Which librdkafka consumer properties a supervisor spec may set, and to which values.

An allow-list, not a deny-list: librdkafka has properties that read files on the server, call
URLs, load native code or build shell commands, and a new librdkafka version may add more. A
spec may set only what a consumer needs to reach and authenticate to a broker (see
:data:`ALLOWED_CONSUMER_PROPERTIES`), each value checked (type, range, enum, characters,
length). Everything else is refused naming the key. The same check runs when a spec is
loaded and again right before its properties are handed to librdkafka
(:func:`resolve_consumer_properties`), so a spec stored by an older version cannot bypass it.

Operators (never specs) configure, through the overlord's environment:

``OVERLORD_CONSUMER_PROPERTIES_ALLOWED``
    comma-separated extra keys a spec may set (values: a string of at most 1024 characters
    without control or shell characters, an integer or a boolean).
``OVERLORD_ALLOWED_TOKEN_ENDPOINTS``
    comma-separated OAuth token endpoints ``sasl.oauthbearer.token.endpoint.url`` may name:
    an entry is an exact URL, or, ending in ``/``, allows every URL under that path. Unset: no
    OAUTHBEARER.
``OVERLORD_ALLOWED_BOOTSTRAP``
    comma-separated ``host:port`` brokers to which the environment provider
    (``druid.dynamic.config.provider``) may send secrets of the overlord. Unset: no provider.
``OVERLORD_KAFKA_BOOTSTRAP_SERVERS``
    the service's brokers (its setting of the same name), which a spec without
    ``bootstrap.servers`` reads from.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from specs.spec_errors import SpecError, join_path, json_type_name, key_path

__all__ = [
    "ALLOWED_BOOTSTRAP_VARIABLE",
    "ALLOWED_CONSUMER_PROPERTIES",
    "ALLOWED_KEYS_VARIABLE",
    "DEFAULT_BOOTSTRAP_VARIABLE",
    "DYNAMIC_CONFIG_PROVIDER",
    "ENVIRONMENT_SECRET_PROPERTIES",
    "EXACT_READ_CONSUMER_PROPERTIES",
    "PROPERTIES_PATH",
    "SECRET_ENV_PREFIX",
    "TOKEN_ENDPOINTS_VARIABLE",
    "ConsumerPropertiesPolicy",
    "consumer_property_errors",
    "environment_secret_values",
    "resolve_consumer_properties",
]

ALLOWED_KEYS_VARIABLE = "OVERLORD_CONSUMER_PROPERTIES_ALLOWED"
"""Environment variable: comma-separated extra consumerProperties keys an operator allows."""
TOKEN_ENDPOINTS_VARIABLE = "OVERLORD_ALLOWED_TOKEN_ENDPOINTS"
"""Environment variable: comma-separated OAuth token endpoint URLs (exact, or prefixes ending in ``/``)."""
ALLOWED_BOOTSTRAP_VARIABLE = "OVERLORD_ALLOWED_BOOTSTRAP"
"""Environment variable: comma-separated ``host:port`` brokers the environment provider may send secrets to."""
DEFAULT_BOOTSTRAP_VARIABLE = "OVERLORD_KAFKA_BOOTSTRAP_SERVERS"
"""Environment variable of the service's brokers, used by a spec without ``bootstrap.servers``."""

PROPERTIES_PATH = "spec.ioConfig.consumerProperties"
"""Where consumerProperties sit in a supervisor spec (the prefix of the paths in errors)."""

DYNAMIC_CONFIG_PROVIDER = "druid.dynamic.config.provider"
"""The consumerProperties key of Druid's dynamic config provider (values taken from elsewhere)."""

SECRET_ENV_PREFIX = "OVERLORD_SECRET_"
"""A dynamic config provider may read only environment variables with this prefix: a spec must not
be able to copy the overlord's own secrets (database URL, cloud keys) into properties sent to a broker."""

ENVIRONMENT_SECRET_PROPERTIES = frozenset({
    "sasl.username", "sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password", "ssl.key.pem",
})
"""The only properties the environment provider may fill: credentials, never a property whose
value is sent in clear in every request (``client.id``) or that says where to connect."""

EXACT_READ_CONSUMER_PROPERTIES: dict[str, str | bool] = {
    "enable.auto.commit": False,  # offsets are committed only by the publish transaction
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,  # a range ending on a transaction marker ends at the EOF watermark
    "auto.offset.reset": "error",  # a range lost to retention fails loudly instead of being skipped
    "isolation.level": "read_committed",  # aborted transactions are never indexed
}
"""Consumer settings an exact range read depends on: the reader applies them after the spec's
``consumerProperties``, and a spec that sets one of them to another value is refused."""

PropertyValue = str | int | bool
_OPERATOR_MAX_LENGTH = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PEM_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab, LF and CR are allowed
_SHELL = re.compile(r"[`$;|&<>\\'\"(){}\s*?!#~]")
_BROKER = re.compile(r"(?:(?:plaintext|ssl|sasl_plaintext|sasl_ssl)://)?"
                     r"(\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?):([0-9]{1,5})", re.IGNORECASE)
_URL = re.compile(r"https?://[a-z0-9.\-\[\]:]+(?:/[a-z0-9._~!$&'()*+,;=:%/-]*)?(?:\?[a-z0-9._~!$&'()*+,;=:%/?-]*)?",
                  re.IGNORECASE)


@dataclass(frozen=True)
class ConsumerPropertiesPolicy:
    """What the operator configured (read by :meth:`from_environment`; given directly in tests)."""

    extra_keys: frozenset[str] = frozenset()
    """More keys a spec may set (``OVERLORD_CONSUMER_PROPERTIES_ALLOWED``)."""
    token_endpoints: tuple[str, ...] = ()
    """OAuth token endpoints: exact URLs, or prefixes ending in ``/`` (``OVERLORD_ALLOWED_TOKEN_ENDPOINTS``)."""
    allowed_brokers: frozenset[str] = frozenset()
    """Lower-case ``host:port`` brokers the environment provider may send secrets to
    (``OVERLORD_ALLOWED_BOOTSTRAP``)."""
    default_bootstrap: str | None = None
    """The service's brokers for a spec without ``bootstrap.servers`` (``OVERLORD_KAFKA_BOOTSTRAP_SERVERS``)."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ConsumerPropertiesPolicy:
        """The policy the overlord's environment (or ``environ``) configures."""
        env = os.environ if environ is None else environ

        def items(name: str) -> list[str]:
            return [item.strip() for item in env.get(name, "").split(",") if item.strip()]

        return cls(extra_keys=frozenset(items(ALLOWED_KEYS_VARIABLE)),
                   token_endpoints=tuple(items(TOKEN_ENDPOINTS_VARIABLE)),
                   allowed_brokers=frozenset(_broker_name(b) for b in items(ALLOWED_BOOTSTRAP_VARIABLE)),
                   default_bootstrap=env.get(DEFAULT_BOOTSTRAP_VARIABLE) or None)

    def allows_endpoint(self, url: str) -> bool:
        """Whether ``url`` is an allowed token endpoint (equal to an entry, or under one ending in ``/``)."""
        return any(url == entry or (entry.endswith("/") and url.startswith(entry)) for entry in self.token_endpoints)


Check = Callable[[PropertyValue, ConsumerPropertiesPolicy], str | None]
"""A value check: the problem of a value (a message that never repeats a secret), or None."""


def _show(value: PropertyValue) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _integer(low: int, high: int) -> Check:
    def check(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,10}", value.strip()):
            number = int(value)
        if number is None or not low <= number <= high:
            return f"expected an integer from {low} to {high}, got {_show(value)}"
        return None
    return check


def _boolean(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
    if isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false")):
        return None
    return f"expected true or false, got {_show(value)}"


def _choice(*choices: str, case_sensitive: bool = False) -> Check:
    def check(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
        if isinstance(value, str) and (value if case_sensitive else value.lower()) in choices:
            return None
        return f"expected one of {', '.join(choices)}, got {_show(value)}"
    return check


def _text(max_length: int, pattern: str | None = None, what: str = "") -> Check:
    """A string of at most ``max_length`` characters, no control characters, matching ``pattern``."""
    def check(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
        if not isinstance(value, str) or not value or len(value) > max_length:
            return _not_a_string(value, max_length)
        if _CONTROL.search(value) or (pattern is not None and not re.fullmatch(pattern, value)):
            return f"expected {what or 'text without control characters'}, got {_show(value)}"
        return None
    return check


def _not_a_string(value: PropertyValue, max_length: int) -> str:
    """Why ``value`` is not a string of 1 to ``max_length`` characters (it never repeats the value)."""
    if not isinstance(value, str):
        return f"expected a string, got {json_type_name(value)}"
    return f"expected 1 to {max_length} characters, got {len(value)}"


def _secret(max_length: int) -> Check:
    """A credential: a string, bounded, no control characters; the message never repeats it."""
    def check(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
        if not isinstance(value, str) or not value or len(value) > max_length:
            return _not_a_string(value, max_length)
        if _CONTROL.search(value):
            return "expected no control characters (the value is not shown)"
        return None
    return check


def _pem(max_length: int) -> Check:
    """PEM text (certificates or a key): ``-----BEGIN`` blocks, bounded; the message never repeats it."""
    def check(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
        if not isinstance(value, str):
            return f"expected PEM text, got {json_type_name(value)}"
        if len(value) > max_length:
            return f"expected at most {max_length} characters of PEM text, got {len(value)}"
        if "-----BEGIN " not in value or _PEM_CONTROL.search(value):
            return "expected PEM text (-----BEGIN ...-----), not a file name (the value is not shown)"
        return None
    return check


def _brokers(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
    if not isinstance(value, str) or len(value) > 4096 or _parse_brokers(value) is None:
        return f"expected a comma-separated list of host:port (at most 4096 characters), got {_show(value)}"
    return None


def _token_endpoint(value: PropertyValue, policy: ConsumerPropertiesPolicy) -> str | None:
    if not isinstance(value, str) or len(value) > 2048 or not _URL.fullmatch(value) or ".." in value:
        return f"expected an http(s) URL without user, fragment or '..', got {_show(value)}"
    if not policy.allows_endpoint(value):
        return (f"{_show(value)} is not an allowed token endpoint: an operator lists the allowed ones in "
                f"{TOKEN_ENDPOINTS_VARIABLE} (comma-separated exact URLs, or prefixes ending in /)")
    return None


def _operator_value(value: PropertyValue, _: ConsumerPropertiesPolicy) -> str | None:
    """The check of a key an operator added: no command or file name can be made of it."""
    if isinstance(value, str) and (len(value) > _OPERATOR_MAX_LENGTH or _CONTROL.search(value)
                                   or _SHELL.search(value)):
        return (f"expected at most {_OPERATOR_MAX_LENGTH} characters without control characters, spaces or "
                "shell characters, got " + _show(value))
    return None


_NAME = r"[A-Za-z0-9._-]+"
_MS_DAY = 86_400_000
_INT_MAX = 2_147_483_647

ALLOWED_CONSUMER_PROPERTIES: Mapping[str, Check] = MappingProxyType({
    # where the brokers are, and who this client is
    "bootstrap.servers": _brokers,
    "client.id": _text(255, _NAME, "letters, digits, '.', '_' or '-'"),
    "client.rack": _text(255, _NAME, "letters, digits, '.', '_' or '-'"),
    "broker.address.family": _choice("any", "v4", "v6"),
    # authentication: SASL PLAIN/SCRAM, OAUTHBEARER client credentials at an allowed endpoint
    "security.protocol": _choice("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"),
    "sasl.mechanism": _choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", case_sensitive=True),
    "sasl.mechanisms": _choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", case_sensitive=True),
    "sasl.username": _secret(1024),
    "sasl.password": _secret(1024),
    "sasl.oauthbearer.method": _choice("oidc"),
    "sasl.oauthbearer.token.endpoint.url": _token_endpoint,
    "sasl.oauthbearer.client.id": _text(1024, r"[\x21-\x7e]+", "printable ASCII without spaces"),
    "sasl.oauthbearer.client.secret": _secret(1024),
    "sasl.oauthbearer.scope": _text(1024, r"[\x21\x23-\x5b\x5d-\x7e]+(?: [\x21\x23-\x5b\x5d-\x7e]+)*",
                                    "space-separated scope tokens (RFC 6749)"),
    "sasl.oauthbearer.extensions": _text(1024, r"[A-Za-z]+=[^,]*(?:,[A-Za-z]+=[^,]*)*",
                                         "comma-separated key=value pairs"),
    # TLS, certificates and keys as PEM text (never a file on the server)
    "ssl.ca.pem": _pem(262_144),
    "ssl.certificate.pem": _pem(65_536),
    "ssl.key.pem": _pem(65_536),
    "ssl.key.password": _secret(1024),
    "https.ca.pem": _pem(262_144),
    "ssl.endpoint.identification.algorithm": _choice("none", "https"),
    "enable.ssl.certificate.verification": _boolean,
    "ssl.cipher.suites": _text(1024, r"[A-Za-z0-9:+!._@=-]+", "an OpenSSL cipher list"),
    # timeouts, keep-alive and back-off
    "socket.timeout.ms": _integer(10, 300_000),
    "socket.connection.setup.timeout.ms": _integer(1000, _INT_MAX),
    "socket.keepalive.enable": _boolean,
    "connections.max.idle.ms": _integer(0, _INT_MAX),
    "session.timeout.ms": _integer(1, 3_600_000),
    "heartbeat.interval.ms": _integer(1, 3_600_000),
    "max.poll.interval.ms": _integer(1, _MS_DAY),
    "api.version.request.timeout.ms": _integer(1, 300_000),
    "reconnect.backoff.ms": _integer(0, 3_600_000),
    "reconnect.backoff.max.ms": _integer(0, 3_600_000),
    "retry.backoff.ms": _integer(1, 300_000),
    "retry.backoff.max.ms": _integer(1, 300_000),
    "metadata.max.age.ms": _integer(1, _MS_DAY),
    "topic.metadata.refresh.interval.ms": _integer(-1, 3_600_000),
    "fetch.error.backoff.ms": _integer(0, 300_000),
    # fetch sizes and queues
    "fetch.max.bytes": _integer(0, 2_147_483_135),
    "fetch.min.bytes": _integer(1, 100_000_000),
    "fetch.wait.max.ms": _integer(0, 300_000),
    "max.partition.fetch.bytes": _integer(1, 1_000_000_000),
    "fetch.message.max.bytes": _integer(1, 1_000_000_000),
    "queued.max.messages.kbytes": _integer(1, 2_097_151),
    "queued.min.messages": _integer(1, 10_000_000),
    "receive.message.max.bytes": _integer(1000, _INT_MAX),
    "check.crcs": _boolean,
    # the exact read's own settings, with the values it needs (checked by consumer_property_errors)
    **{key: _boolean if isinstance(value, bool) else _text(64)
       for key, value in EXACT_READ_CONSUMER_PROPERTIES.items()},
})
"""Every key a spec may set, with the check of its value (librdkafka's ranges and enums)."""


def consumer_property_errors(properties: Mapping[str, Any],
                             policy: ConsumerPropertiesPolicy | None = None) -> list[tuple[str, str]]:
    """Every problem of a spec's consumerProperties, as ``(path relative to consumerProperties, message)``.

    ``policy`` defaults to the operator's, read from the environment now.
    """
    policy = ConsumerPropertiesPolicy.from_environment() if policy is None else policy
    errors: list[tuple[str, str]] = []
    for key, value in properties.items():
        path = key_path(str(key))
        if key == DYNAMIC_CONFIG_PROVIDER:
            errors += [(join_path(path, sub), message) for sub, message in _provider_errors(value, properties, policy)]
        elif not isinstance(value, str | int | bool):
            errors.append((path, f"expected a string, integer or boolean, got {json_type_name(value)}"))
        elif (problem := _value_problem(str(key), value, policy)) is not None:
            errors.append((path, problem))
    errors += _combination_errors(properties)
    return errors


def _value_problem(key: str, value: PropertyValue, policy: ConsumerPropertiesPolicy) -> str | None:
    """Why ``key`` may not be set to ``value``, or None: the one place the allow-list is applied."""
    required = EXACT_READ_CONSUMER_PROPERTIES.get(key)
    if required is not None and str(value).lower() != str(required).lower():
        return (f"the exact range read needs {key}={str(required).lower()}, got {str(value).lower()}; "
                "remove it from consumerProperties")
    check = ALLOWED_CONSUMER_PROPERTIES.get(key)
    if check is None and key in policy.extra_keys:
        check = _operator_value
    if check is None:
        hint = (" (give certificates and keys as PEM text, e.g. ssl.ca.pem, ssl.key.pem)"
                if key.endswith((".location", ".file", ".keytab")) else "")
        return (f"{key} is not on the allow-list of consumer properties{hint}; a spec may set only what a consumer "
                f"needs to reach and authenticate to a broker, and an operator can allow more keys with "
                f"{ALLOWED_KEYS_VARIABLE}=key,key")
    return check(value, policy)


def _combination_errors(properties: Mapping[str, Any]) -> list[tuple[str, str]]:
    """OAUTHBEARER only as OIDC client credentials at an (allowed) token endpoint; one SASL mechanism."""
    errors: list[tuple[str, str]] = []
    mechanisms = {k: properties[k] for k in ("sasl.mechanism", "sasl.mechanisms") if k in properties}
    if len(set(map(str, mechanisms.values()))) > 1:
        errors.append((key_path("sasl.mechanisms"), "sasl.mechanism and sasl.mechanisms name the same setting; "
                                                     "give one"))
    method = str(properties.get("sasl.oauthbearer.method", "")).lower()
    for key, mechanism in mechanisms.items():
        if mechanism == "OAUTHBEARER" and method != "oidc":
            errors.append((key_path(key), "OAUTHBEARER is supported only as client credentials: set "
                                          "sasl.oauthbearer.method=oidc and sasl.oauthbearer.token.endpoint.url"))
    if method == "oidc" and "sasl.oauthbearer.token.endpoint.url" not in properties:
        errors.append((key_path("sasl.oauthbearer.method"), "oidc needs sasl.oauthbearer.token.endpoint.url"))
    return errors


def _provider_errors(value: object, properties: Mapping[str, Any],
                     policy: ConsumerPropertiesPolicy) -> list[tuple[str, str]]:
    """Problems of a ``druid.dynamic.config.provider`` value (paths relative to it)."""
    if not isinstance(value, dict):
        return [("", f"expected an object such as {{\"type\": \"environment\", \"variables\": {{...}}}}, "
                     f"got {json_type_name(value)}")]
    if value.get("type") != "environment" or set(value) - {"type", "variables"}:
        return [("type", "only the environment provider is supported: "
                         '{"type": "environment", "variables": {"property": "VARIABLE"}}')]
    variables = value.get("variables")
    if not isinstance(variables, dict):
        return [("variables", f"expected an object, got {json_type_name(variables)}")]
    errors = []
    for key, name in variables.items():
        path = join_path("variables", key_path(str(key)))
        if key not in ENVIRONMENT_SECRET_PROPERTIES:
            errors.append((path, f"the environment provider fills only secrets: "
                                 f"{', '.join(sorted(ENVIRONMENT_SECRET_PROPERTIES))}; got {key}"))
        elif key in properties:
            errors.append((path, f"{key} is also set in consumerProperties; give it once"))
        elif (not isinstance(name, str) or not name.startswith(SECRET_ENV_PREFIX)
              or not re.fullmatch(r"[A-Z0-9_]{1,128}", name)):
            errors.append((path, f"expected the name of an environment variable starting with {SECRET_ENV_PREFIX}, "
                                 f"got {name!r}"))
    if variables:
        problem = _brokers_problem(properties, policy)
        if problem is not None:
            errors.append(("", problem))
    return errors


def _brokers_problem(properties: Mapping[str, Any], policy: ConsumerPropertiesPolicy) -> str | None:
    """Why the overlord's secrets may not be sent to the spec's brokers, or None."""
    servers = properties.get("bootstrap.servers", policy.default_bootstrap)
    if not isinstance(servers, str):
        return (f"secrets from the environment go only to known brokers: give bootstrap.servers (the service has "
                f"no {DEFAULT_BOOTSTRAP_VARIABLE})")
    brokers = _parse_brokers(servers)
    if brokers is None:
        return None  # refused at bootstrap.servers
    outside = [b for b in brokers if _broker_name(b) not in policy.allowed_brokers]
    if outside:
        return (f"secrets from the environment go only to the brokers an operator lists in "
                f"{ALLOWED_BOOTSTRAP_VARIABLE}; not listed: {', '.join(outside)}")
    return None


def _parse_brokers(text: str) -> list[str] | None:
    """The ``host:port`` entries of a bootstrap.servers value, or None if one is not a broker address."""
    entries = [entry.strip() for entry in text.split(",")]
    for entry in entries:
        match = _BROKER.fullmatch(entry)
        if match is None or not 1 <= int(match.group(2)) <= 65535:
            return None
    return entries


def _broker_name(entry: str) -> str:
    """``host:port`` in lower case, without a ``protocol://`` prefix: how brokers are compared."""
    return entry.strip().lower().rpartition("://")[2]


def resolve_consumer_properties(properties: Mapping[str, Any], policy: ConsumerPropertiesPolicy | None = None,
                                environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A spec's consumerProperties checked again, with the environment provider replaced by the values it names.

    What reaches librdkafka: raises :class:`SpecError` (paths from the spec's root) for anything
    off the allow-list (a spec stored by an older version), and for a variable that is not set
    or whose value fails its property's check (the message never shows the value).
    """
    policy = ConsumerPropertiesPolicy.from_environment(environ) if policy is None else policy
    env = os.environ if environ is None else environ
    errors = consumer_property_errors(properties, policy)
    if errors:
        raise SpecError(errors).prefixed(PROPERTIES_PATH)
    resolved = {k: v for k, v in properties.items() if k != DYNAMIC_CONFIG_PROVIDER}
    provider = properties.get(DYNAMIC_CONFIG_PROVIDER) or {}
    variables_path = join_path(join_path(PROPERTIES_PATH, key_path(DYNAMIC_CONFIG_PROVIDER)), "variables")
    for key, variable in provider.get("variables", {}).items():
        path = join_path(variables_path, key_path(key))
        value = env.get(variable)
        if value is None:
            errors.append((path, f"environment variable {variable} is not set"))
        elif (problem := ALLOWED_CONSUMER_PROPERTIES[key](value, policy)) is not None:
            errors.append((path, f"the value of environment variable {variable} is not a valid {key}: {problem}"))
        else:
            resolved[key] = value
    if errors:
        raise SpecError(errors)
    return resolved


def environment_secret_values(provider: object, environ: Mapping[str, str] | None = None) -> set[str]:
    """The values of the set environment variables a ``druid.dynamic.config.provider`` value names.

    For scrubbing them from free text (errors, logs) like the secrets written in a spec.
    """
    env = os.environ if environ is None else environ
    if not isinstance(provider, Mapping) or not isinstance(provider.get("variables"), Mapping):
        return set()
    names = [name for name in provider["variables"].values() if isinstance(name, str)]
    return {env[name] for name in names if name.startswith(SECRET_ENV_PREFIX) and name in env}
