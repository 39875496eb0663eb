"""The overlord's own origins: the ``Host`` values it answers and the origins that may change it.

Against DNS rebinding and cross-site requests (CSRF).

The overlord's origins are the URLs of ``OVERLORD_PUBLIC_URLS`` (e.g. ``https://druid.example.com``
behind a proxy) plus the address the connection reached: the listening socket's own address with the
connection's scheme (``http://127.0.0.1:8090``), and, when that address is a loopback one, the
loopback names at that port (``localhost``, ``127.0.0.1``, ``[::1]``). With no setting, a developer
reaches the overlord at ``http://localhost:PORT`` or by its IP address and nothing else.

Two ASGI middlewares use them:

- :class:`HostAllowList`: a request whose ``Host`` names another host gets a 421 (all routes but
  liveness). A page of ``evil.example`` whose name the attacker re-points at the overlord's address
  (DNS rebinding) is same-origin to the browser, so it could read answers; its requests carry
  ``Host: evil.example:PORT`` and are refused here. An IP address of the socket itself is no
  rebinding vector (a page at that address is the overlord's own).
- :class:`SameOriginWrites`: a browser sends cached Basic credentials with any request a page makes
  to this overlord, a form another site's page submits included. Such a request carries the page's
  ``Origin`` (or ``Sec-Fetch-Site: cross-site``); a request that may change something (any method
  but GET, HEAD and OPTIONS) whose ``Origin`` is not one of the overlord's origins, compared by
  scheme, host and port, gets a 403. Clients that are not browsers (the CLI, pydruid, curl) send
  neither header and are not affected; reads are not changes, and without CORS headers their
  answers stay hidden from the other site's page.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from overlord.http.auth import LIVENESS_PATHS
from overlord.http.replies import send_error
from overlord.origins import Origin, parse_public_url

__all__ = ["HostAllowList", "SameOriginWrites", "Site"]

_READS = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _origin_header(value: str) -> Origin | None:
    try:
        return parse_public_url(value)
    except ValueError:
        return None  # "null" (sandboxed pages, file:) and anything unparsable is no origin of ours


def _host_header(value: str) -> tuple[str, int | None] | None:
    """``Host`` as (lower-case host, port or None); None if it is not ``host[:port]``."""
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.path or parts.query or parts.fragment or parts.username is not None:
        return None
    return parts.hostname, port


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Site:
    """The configured public origins (``OVERLORD_PUBLIC_URLS``); the connection's own are added per request."""

    public: frozenset[Origin] = frozenset()

    @classmethod
    def of(cls, urls: Iterable[str]) -> Site:
        return cls(frozenset(parse_public_url(url) for url in urls))

    def origins(self, scope: Scope) -> frozenset[Origin]:
        """The configured origins and those of the socket the request arrived on."""
        server = scope.get("server")
        if not server or server[1] is None:
            return self.public  # a Unix socket: only what is configured
        host, port = str(server[0]).lower().strip("[]"), int(server[1])
        scheme = scope.get("scheme", "http")
        own = {Origin(scheme, host, port)}
        if _is_loopback(host):
            own |= {Origin(scheme, name, port) for name in _LOOPBACK_NAMES}
        return self.public | own

    def allows_host(self, scope: Scope, value: str) -> bool:
        """Whether ``Host: value`` names this overlord: a host of its origins, and that origin's port if given.

        The port may be omitted: behind a proxy that ends TLS, ``Host: druid.example.com`` arrives over
        plain HTTP for ``https://druid.example.com``.
        """
        parsed = _host_header(value)
        if parsed is None:
            return False
        host, port = parsed
        return any(o.host == host and (port is None or o.port == port) for o in self.origins(scope))

    def allows_origin(self, scope: Scope, value: str) -> bool:
        """Whether ``Origin: value`` is one of this overlord's origins (scheme, host and port)."""
        origin = _origin_header(value)
        return origin is not None and origin in self.origins(scope)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class HostAllowList:
    """ASGI middleware: a request whose ``Host`` is not one of the overlord's gets a 421 (liveness excepted)."""

    def __init__(self, app: ASGIApp, site: Site) -> None:
        self.app, self.site = app, site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in LIVENESS_PATHS:
            host = _header(scope, b"host")
            if host is not None and not self.site.allows_host(scope, host):
                allowed = ", ".join(sorted(str(o) for o in self.site.origins(scope)))
                await send_error(send, 421, f"this overlord does not answer for Host {host!r}; it answers for "
                                            f"{allowed} (add its public URL to OVERLORD_PUBLIC_URLS)")
                return
        await self.app(scope, receive, send)


class SameOriginWrites:
    """ASGI middleware: a cross-site request that may change something gets a 403."""

    def __init__(self, app: ASGIApp, site: Site) -> None:
        self.app, self.site = app, site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in _READS and self._cross_site(scope):
            await send_error(send, 403, "refused: a page of another site may not change this overlord "
                                        "(cross-site request; use the console, the CLI or an API client)")
            return
        await self.app(scope, receive, send)

    def _cross_site(self, scope: Scope) -> bool:
        if _header(scope, b"sec-fetch-site") in ("cross-site", "same-site"):
            return True
        origin = _header(scope, b"origin")
        return origin is not None and not self.site.allows_origin(scope, origin)
