"""Web origins (scheme, host, port) and the overlord's public URLs (``OVERLORD_PUBLIC_URLS``); standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["DEFAULT_PORTS", "Origin", "parse_public_url"]

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Origin:
    """A web origin: scheme, lower-case host (IPv6 without brackets) and port (the scheme's default if omitted)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_public_url(url: str) -> Origin:
    """The origin of an ``http(s)://host[:port]`` URL; a ValueError saying what was expected otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"expected a URL such as https://druid.example.com:8443, got {url!r}: {exc}") from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") or parts.query \
            or parts.fragment or parts.username or parts.password:
        raise ValueError(f"expected http(s)://host[:port] with no path, query or user, such as "
                         f"https://druid.example.com:8443, got {url!r}")
    return Origin(parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme])
