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
    """A copy of a spec (or any JSON) with secret values replaced by a mask.

    Secret values: those of secret-looking keys (passwords, tokens, ``basic.auth.user.info``, ...), anywhere, and
    every header a schema registry is sent (``headers``: ``X-Api-Key`` or a tenant header may be one).
    """
    if isinstance(value, dict):
        return {k: (v if k == DYNAMIC_CONFIG_PROVIDER and not _inline_provider(v)  # names environment variables
                    else _masked_headers(v) if k == "headers" and isinstance(v, dict)
                    else MASK if isinstance(k, str) and _SECRET_KEY.search(k) and not isinstance(v, dict | list)
                    else mask_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def _masked_headers(headers: dict[str, Any]) -> dict[str, Any]:
    """Every header value masked (a provider's variable names shown: they hold no secret)."""
    masked: dict[str, Any] = {}
    for name, value in headers.items():
        if name == DYNAMIC_CONFIG_PROVIDER and isinstance(value, dict):
            inline = value.get("config") if _inline_provider(value) else None
            masked[name] = {**value, "config": dict.fromkeys(inline, MASK)} if isinstance(inline, dict) else value
        else:
            masked[name] = value if isinstance(value, dict | list) else MASK
    return masked


def _inline_provider(provider: Any) -> bool:
    """Whether a ``druid.dynamic.config.provider`` holds its values (``mapString``) rather than naming variables."""
    return isinstance(provider, dict) and provider.get("type") == "mapString"


def keep_masked_secrets(spec: Mapping[str, Any], stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """``spec`` (Druid's JSON) with each secret sent as :data:`MASK` set to ``stored``'s value at the same place.

    ``stored``: the supervisor's current spec (Druid's JSON), None if it has none. A masked secret that
    ``stored`` does not hold (or holds only masked) is a :class:`SpecError` naming it. A mask where no
    secret goes (a dimension named ``<masked>``) is left as it is.
    """
    kept_root: Any = stored or {}
    if "spec" not in spec and isinstance(kept_root.get("spec"), Mapping):  # the flat form, against the nested one
        kept_root = {**kept_root, **kept_root["spec"]}
    missing: list[str] = []

    def restore(given: Any, shown: Any, kept: Any, path: str) -> Any:
        if given == MASK and shown == MASK:
            if isinstance(kept, str | int | float) and kept != MASK:
                return kept
            missing.append(path)
            return given
        if isinstance(given, Mapping):
            return {key: restore(item, shown.get(key) if isinstance(shown, Mapping) else None,
                                 kept.get(key) if isinstance(kept, Mapping) else None, join_path(path, key_path(key)))
                    for key, item in given.items()}
        if isinstance(given, list):
            return [restore(item, shown[i] if isinstance(shown, list) and i < len(shown) else None,
                            kept[i] if isinstance(kept, list) and i < len(kept) else None, f"{path}[{i}]")
                    for i, item in enumerate(given)]
        return given

    restored: dict[str, Any] = restore(spec, mask_secrets(dict(spec)), kept_root, "")
    if missing:
        raise SpecError((path, f"is {MASK}, the mask answers show in place of a secret, and there is no stored value "
                               "to keep: give the secret itself") for path in missing)
    return restored
