"""The mask answers show in place of secret values, and specs sent back with it.

Every answer shows a secret consumer property as :data:`MASK`. A user who edits a spec they
read (the console's editor, ``GET`` then ``POST``) sends the mask back; it means "keep the
secret you have", never the literal text ``<masked>`` as a password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from specs.consumer_properties import DYNAMIC_CONFIG_PROVIDER
from specs.spec_errors import SpecError, join_path, key_path

__all__ = ["MASK", "keep_masked_secrets", "mask_secrets"]

MASK = "<masked>"
"""What answers show in place of a secret value."""

_SECRET_KEY = re.compile(r"password|secret|jaas|credential|token|ssl\.key|sasl\.oauthbearer|user\.info|authorization"
                         r"|api.?key|cookie", re.IGNORECASE)


def mask_secrets(value: Any) -> Any:
    """A copy of a spec (or any JSON) with secret-looking consumer properties replaced by a mask."""
    if isinstance(value, dict):
        return {k: (v if k == DYNAMIC_CONFIG_PROVIDER and not _inline_provider(v)  # names environment variables
                    else MASK if isinstance(k, str) and _SECRET_KEY.search(k) and not isinstance(v, dict | list)
                    else mask_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def _inline_provider(provider: Any) -> bool:
    """Whether a ``druid.dynamic.config.provider`` holds its values (``mapString``) rather than naming variables."""
    return isinstance(provider, dict) and provider.get("type") == "mapString"


def _io_config(spec: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The path and value of the spec's ioConfig, in Druid's nested form or the flat one."""
    nested = spec.get("spec")
    if isinstance(nested, Mapping):
        io = nested.get("ioConfig")
        return "spec.ioConfig", io if isinstance(io, Mapping) else {}
    io = spec.get("ioConfig")
    return "ioConfig", io if isinstance(io, Mapping) else {}


def _properties(io: Mapping[str, Any]) -> Mapping[str, Any]:
    found = io.get("consumerProperties")
    return found if isinstance(found, Mapping) else {}


def keep_masked_secrets(spec: Mapping[str, Any], stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """``spec`` (Druid's JSON) with each consumer property sent as :data:`MASK` set to ``stored``'s value.

    ``stored``: the supervisor's current spec (Druid's JSON), None if it has none. A masked
    property that ``stored`` does not hold (or holds only masked) is a :class:`SpecError` naming it.
    """
    path, io = _io_config(spec)
    given, kept = _properties(io), _properties(_io_config(stored or {})[1])
    masked = [key for key, value in given.items() if value == MASK]
    if not masked:
        return dict(spec)
    missing = [key for key in masked if key not in kept or kept[key] == MASK]
    if missing:
        raise SpecError((join_path(f"{path}.consumerProperties", key_path(key)),
                         f"is {MASK}, the mask answers show in place of a secret, and there is no stored value to "
                         "keep: give the secret itself") for key in missing)
    io = {**io, "consumerProperties": {**given, **{key: kept[key] for key in masked}}}
    return {**spec, "spec": {**spec["spec"], "ioConfig": io}} if path.startswith("spec.") else {**spec, "ioConfig": io}
