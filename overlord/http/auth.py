"""Who may call the overlord: HTTP Basic users and bearer tokens, each with a role.

HTTP Basic is what Druid's basic security speaks, so pydruid, Superset and Grafana connect with a
user and password as they would to Druid. Two roles: ``read`` (status, task lists, the console,
SQL) and ``write`` (also submit, suspend, resume, reset, terminate, compact). Every request but
liveness (``/health``, ``/status/health``) needs credentials: none or wrong ones get a 401, a
read credential on a write request a 403.

The auth file (``OVERLORD_AUTH_FILE``) holds argon2 hashes of passwords (``overlord auth
hash-password``) and SHA-256 digests of tokens (``overlord auth new-token``), never the secrets::

    {"users": {"admin": {"role": "write", "passwordHash": "$argon2id$..."}},
     "tokens": {"ci": {"role": "read", "tokenSha256": "9f86d0..."}}}

An argon2 check costs tens of milliseconds, so a successful one is remembered (by a SHA-256 of
the credentials) for :data:`REMEMBER_S`; a rotated password takes effect at the next restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from overlord.http.replies import send_error

__all__ = ["LIVENESS_PATHS", "AuthFile", "AuthMiddleware", "Authenticator", "hash_password", "new_token",
           "required_role"]

Role = Literal["read", "write"]

LIVENESS_PATHS = frozenset({"/health", "/status/health"})
"""Answered without credentials: load balancers and orchestrators probe them."""

READ_POSTS = frozenset({"/druid/v2/sql", "/druid/v2"})
"""POST routes that only read (queries)."""

REMEMBER_S = 300.0
"""How long a verified password is remembered."""

_hasher = PasswordHasher()


class UserEntry(BaseModel):
    """A user of HTTP Basic authentication."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    role: Role
    password_hash: str = Field(alias="passwordHash", pattern=r"^\$argon2")


class TokenEntry(BaseModel):
    """A bearer token, known by its SHA-256 digest."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    role: Role
    token_sha256: str = Field(alias="tokenSha256", pattern=r"^[0-9a-f]{64}$")


class AuthFile(BaseModel):
    """The content of ``OVERLORD_AUTH_FILE``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    users: dict[str, UserEntry] = {}
    tokens: dict[str, TokenEntry] = {}

    @classmethod
    def load(cls, path: str | Path) -> AuthFile:
        """Read and validate the file; a :class:`SystemExit` naming the problem if it is unusable."""
        try:
            loaded = cls.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError) as exc:
            raise SystemExit(f"OVERLORD_AUTH_FILE {path}: {exc}") from None
        if not loaded.users and not loaded.tokens:
            raise SystemExit(f"OVERLORD_AUTH_FILE {path}: no users and no tokens: nobody could call the overlord")
        return loaded


def hash_password(password: str) -> str:
    """The argon2id hash of ``password`` for the auth file."""
    return _hasher.hash(password)


def new_token() -> tuple[str, str]:
    """A new random bearer token and its SHA-256 digest (the digest goes in the auth file)."""
    token = secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()


def required_role(method: str, path: str) -> Role | None:
    """The role a request needs (None: liveness, open to all). One rule for every route."""
    if path in LIVENESS_PATHS:
        return None
    if method in ("GET", "HEAD", "OPTIONS") or (method == "POST" and path.rstrip("/") in READ_POSTS):
        return "read"
    return "write"


class Authenticator:
    """Checks an ``Authorization`` header against the auth file; thread-safe."""

    def __init__(self, config: AuthFile) -> None:
        self._users = config.users
        self._tokens = {entry.token_sha256: entry.role for entry in config.tokens.values()}
        self._verified: dict[str, tuple[Role, float]] = {}
        self._decoy = _hasher.hash(secrets.token_hex(16))
        self._lock = threading.Lock()

    def remembered(self, authorization: str) -> Role | None:
        """The role of credentials verified recently, without hashing a password."""
        key = hashlib.sha256(authorization.encode()).hexdigest()
        with self._lock:
            found = self._verified.get(key)
        return found[0] if found and found[1] > time.monotonic() else None

    def role(self, authorization: str | None) -> Role | None:
        """The role the header's credentials grant, None for missing or wrong ones (may take ~50 ms)."""
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        role: Role | None = None
        if scheme.lower() == "bearer":
            digest = hashlib.sha256(value.strip().encode()).hexdigest()
            role = next((r for known, r in self._tokens.items() if hmac.compare_digest(known, digest)), None)
        elif scheme.lower() == "basic":
            role = self._basic(value.strip())
        if role is not None and scheme.lower() == "basic":
            with self._lock:
                if len(self._verified) > 10_000:
                    self._verified.clear()
                key = hashlib.sha256(authorization.encode()).hexdigest()
                self._verified[key] = (role, time.monotonic() + REMEMBER_S)
        return role

    def _basic(self, value: str) -> Role | None:
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        entry = self._users.get(user)
        try:  # an unknown user costs a hash check too: the time taken does not tell which users exist
            _hasher.verify(entry.password_hash if entry else self._decoy, password)
        except (VerificationError, InvalidHashError):
            return None
        return entry.role if entry else None


class AuthMiddleware:
    """ASGI middleware: every request but liveness must carry credentials with the role it needs."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app, self.authenticator = app, authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            needed = required_role(scope["method"], scope["path"])
            if needed is not None:
                header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
                granted = self.authenticator.remembered(header) if header else None
                if granted is None and header:
                    granted = await run_in_threadpool(self.authenticator.role, header)
                if granted is None:
                    await send_error(send, 401, "authentication required: HTTP Basic (user and password) or a bearer "
                                            "token", [(b"www-authenticate", b'Basic realm="overlord"')])
                    return
                if needed == "write" and granted != "write":
                    await send_error(send, 403, f"{scope['method']} {scope['path']} needs the write role; these "
                                            "credentials have the read role")
                    return
        await self.app(scope, receive, send)
