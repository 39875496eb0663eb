"""Keeping consumerProperties secrets out of HTTP responses and log lines.

Two layers. Structured data is masked by key (:func:`specs.masked.mask_secrets`: a value
under ``sasl.password``, ``sasl.jaas.config`` and the like becomes ``<masked>``). Free text
(error messages, log lines, tracebacks) is scrubbed by value: :class:`SecretRegistry` learns
the secret values of every spec the overlord runs and replaces any occurrence of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from specs import DYNAMIC_CONFIG_PROVIDER, environment_secret_values
from specs.masked import MASK, mask_secrets

__all__ = ["SecretLogFilter", "SecretRegistry", "secret_values"]

MIN_SECRET_LENGTH = 4
"""Shorter values are not scrubbed from free text: replacing every ``1`` or ``no`` would garble it."""


def secret_values(value: Any) -> set[str]:
    """The string forms of every value :func:`mask_secrets` would mask in ``value``."""
    found: set[str] = set()

    def walk(original: Any, masked: Any) -> None:
        if isinstance(original, Mapping) and isinstance(masked, Mapping):
            for key, item in original.items():
                if key == DYNAMIC_CONFIG_PROVIDER and masked.get(key) == item:  # it names environment variables
                    found.update(environment_secret_values(item))
                elif masked.get(key) == MASK and item != MASK and not isinstance(item, Mapping | list):
                    found.add(str(item))
                else:
                    walk(item, masked.get(key))
        elif isinstance(original, list) and isinstance(masked, list):
            for item, masked_item in zip(original, masked, strict=False):
                walk(item, masked_item)

    walk(value, mask_secrets(value))
    return found


class SecretRegistry:
    """Secret values of accepted specs, for scrubbing free text. Thread-safe; values are never forgotten."""

    def __init__(self) -> None:
        self._values: tuple[str, ...] = ()  # longest first
        self._lock = threading.Lock()

    @classmethod
    def of(cls, specs: Iterable[Any]) -> SecretRegistry:
        """A registry of just the secret values in ``specs``."""
        registry = cls()
        registry.learn(specs)
        return registry

    def learn(self, specs: Iterable[Any]) -> None:
        """Remember the secret values found in ``specs`` (Druid JSON of supervisor specs)."""
        new = {v for spec in specs for v in secret_values(spec) if len(v) >= MIN_SECRET_LENGTH}
        with self._lock:
            self._values = tuple(sorted(set(self._values) | new, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """``text`` with every known secret value replaced by the mask (longest first)."""
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def scrub_strings(self, value: Any) -> Any:
        """A copy of decoded JSON with secrets scrubbed from every string (numbers and booleans untouched)."""
        if not self._values:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, Mapping):
            return {self.scrub(str(k)): self.scrub_strings(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_strings(v) for v in value]
        return value


class SecretLogFilter(logging.Filter):
    """A handler filter that formats each record's message (and traceback) and scrubs secrets from it."""

    def __init__(self, registry: SecretRegistry) -> None:
        super().__init__()
        self.registry = registry

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        scrubbed = self.registry.scrub(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.registry.scrub(record.exc_text)
        return True
