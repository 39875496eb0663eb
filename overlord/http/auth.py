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

An argon2 check costs tens of milliseconds and 64 MiB, so its outcome, success or failure, is
remembered (by an HMAC of the credentials) for :data:`REMEMBER_S`, and checks run in a low-priority
process of their own, a bounded number waiting (:class:`Authenticator`); a rotated password takes
effect at the next restart.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import multiprocessing
import os
import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Literal, NamedTuple

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from indexing_task.child_processes import die_with_parent
from overlord.http.replies import send_error
from overlord.overlord_errors import druid_error

__all__ = ["BUSY", "LIVENESS_PATHS", "AuthFile", "AuthMiddleware", "Authenticator", "Grant", "hash_password",
           "new_token", "required_role"]

Role = Literal["read", "write"]

LIVENESS_PATHS = frozenset({"/health", "/health/leader", "/status/health"})
"""Answered without credentials: load balancers and orchestrators probe them (liveness, and readiness: leader)."""

READ_POSTS = frozenset({"/druid/v2/sql", "/druid/v2"})
"""POST routes that only read (queries)."""

REMEMBER_S = 300.0
"""How long verified (and refused) credentials are remembered."""

MAX_REMEMBERED = 10_000
"""The most verified, and the most refused, credentials remembered; the oldest are forgotten first."""

HASH_WORKERS = max(1, min(4, (os.cpu_count() or 1) // 2))
"""Processes that run argon2 checks: half the cores, 1 to 4 (each check holds 64 MiB while it runs)."""

MAX_WAITING = 8
"""Password checks that may wait for a hashing process; more get a 429 (after :data:`BUSY_HOLD_S`)."""

BUSY_HOLD_S = 1.0
"""How long a password check that found the queue full waits before its 429 (as its ``Retry-After`` says):
a flood's client asks again once a second, not as fast as the event loop can refuse it, so the loop keeps
its time for the requests of credentials already verified. The wait is a sleeping coroutine: it costs nothing."""

BUSY: Literal["busy"] = "busy"
"""What :meth:`Authenticator.check` answers when too many password checks wait."""

_hasher = PasswordHasher()


class UserEntry(BaseModel):
    """A user of HTTP Basic authentication."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    role: Role
    password_hash: str = Field(alias="passwordHash", pattern=r"^\$argon2")


class Grant(NamedTuple):
    """What verified credentials grant: a role, to a user (Basic) or a token (by its name in the auth file)."""

    role: Role
    who: str


class TokenEntry(BaseModel):
    """A bearer token, known by its SHA-256 digest."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    role: Role
    token_sha256: str = Field(alias="tokenSha256", pattern=r"^[0-9a-f]{64}$")


_AUTH_FILE_SHAPE = ('{"users": {"NAME": {"role": "read" or "write", "passwordHash": "$argon2id$..."}}, '
                    '"tokens": {"NAME": {"role": ..., "tokenSha256": "64 hex digits"}}} (README, Security)')
_AUTH_FIELD_HELP = {
    "passwordHash": "expected an argon2 hash (`overlord auth hash-password` prints one), never the password",
    "tokenSha256": "expected the token's SHA-256 as 64 lower-case hex digits (`overlord auth new-token`)",
    "role": 'expected "read" or "write"',
}
"""What an auth file looks like, and what its fields take: a refusal names the field and says this."""


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
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {_AUTH_FIELD_HELP.get(str(e['loc'][-1]), e['msg'])}"
                                 for e in exc.errors())
            raise SystemExit(f"OVERLORD_AUTH_FILE {path}: {problems}. Expected {_AUTH_FILE_SHAPE}") from None
        except (OSError, ValueError) as exc:
            raise SystemExit(f"OVERLORD_AUTH_FILE {path}: {exc}. Expected {_AUTH_FILE_SHAPE}") from None
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
    """Checks an ``Authorization`` header against the auth file, with argon2 work bounded; thread-safe.

    An argon2 check costs ~50 ms of CPU and 64 MiB of memory, and anyone who reaches the port can ask
    for one, so before the first one:

    - credentials verified in the last :data:`REMEMBER_S` are answered from memory, and so are
      credentials refused in that time (the same user and wrong password again);
    - bearer tokens and malformed headers cost a SHA-256 or nothing;
    - the rest wait for one of :data:`HASH_WORKERS` hashing processes, at most :data:`MAX_WAITING`
      of them; past that the answer is :data:`BUSY` (a 429) after :data:`BUSY_HOLD_S`, with no check.
      Those processes run at the lowest CPU priority, and in processes of their own their 64 MiB
      maps and unmaps stay out of the overlord's memory map (a logged-in request under a flood: max
      116 ms, against 140-154 ms with checks on threads). A flood of wrong passwords thus costs idle
      CPU, ~100 MiB and a refusal per client a second.

    An unknown user is checked against a decoy hash, through the same queue: the answer takes as long
    as for a known user, so timing does not tell which users exist.
    Remembered credentials are keyed by an HMAC with a per-process key, never by the secret itself.
    """

    def __init__(self, config: AuthFile, *, hash_workers: int = HASH_WORKERS, max_waiting: int = MAX_WAITING,
                 busy_hold_s: float = BUSY_HOLD_S) -> None:
        self._users = config.users
        self._tokens = {entry.token_sha256: Grant(entry.role, name) for name, entry in config.tokens.items()}
        self._verified: OrderedDict[bytes, tuple[Grant, float]] = OrderedDict()
        self._refused: OrderedDict[bytes, float] = OrderedDict()
        self._decoy = _hasher.hash(secrets.token_hex(16))
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._hash_workers = hash_workers
        self._hashing = self._hashing_processes()
        self._max_in_line = hash_workers + max_waiting
        self._in_line = 0  # checks queued or running; changed only on the event loop
        self._busy_hold_s = busy_hold_s

    def _digest(self, authorization: str) -> bytes:
        return hmac.digest(self._key, authorization.encode("utf-8", "surrogateescape"), "sha256")

    def remembered(self, authorization: str) -> Grant | None:
        """What credentials verified recently grant, without hashing a password."""
        key = self._digest(authorization)
        with self._lock:
            found = self._verified.get(key)
        return found[0] if found and found[1] > time.monotonic() else None

    def recently_refused(self, authorization: str) -> bool:
        """Whether these exact credentials were refused within :data:`REMEMBER_S`."""
        key = self._digest(authorization)
        with self._lock:
            until = self._refused.get(key)
        return until is not None and until > time.monotonic()

    async def check(self, authorization: str) -> Grant | None | Literal["busy"]:
        """What the header grants, None for wrong credentials, :data:`BUSY` if too many checks wait.

        Call on the event loop: it may wait for a hashing thread, never blocks the loop.
        """
        if not authorization:
            return None
        if (grant := self.remembered(authorization)) is not None:
            return grant
        if self.recently_refused(authorization):
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            digest = hashlib.sha256(value.strip().encode("utf-8", "surrogateescape")).hexdigest()
            return next((r for known, r in self._tokens.items() if hmac.compare_digest(known, digest)), None)
        if scheme.lower() != "basic" or (credentials := _basic_credentials(value.strip())) is None:
            return None
        if self._in_line >= self._max_in_line:
            await asyncio.sleep(self._busy_hold_s)
            return BUSY
        user, password = credentials
        entry = self._users.get(user)  # an unknown user costs a hash check too: timing does not tell who exists
        self._in_line += 1
        try:
            matches = await asyncio.wrap_future(self._hashing.submit(
                _password_matches, entry.password_hash if entry else self._decoy, password))
        except BrokenProcessPool:  # a hashing process died (killed, out of memory): start new ones
            self._hashing = self._hashing_processes()
            return BUSY
        finally:
            self._in_line -= 1
        granted = Grant(entry.role, user) if entry and matches else None
        self._remember(authorization, granted)
        return granted

    def _hashing_processes(self) -> ProcessPoolExecutor:
        """The processes that check passwords (started at the first check, by spawn: nothing of this one copied)."""
        return ProcessPoolExecutor(max_workers=self._hash_workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_yield_the_cpu)

    def close(self) -> None:
        """Stop the hashing processes."""
        self._hashing.shutdown(wait=False, cancel_futures=True)

    def _remember(self, authorization: str, grant: Grant | None) -> None:
        key, until = self._digest(authorization), time.monotonic() + REMEMBER_S
        with self._lock:
            if grant is None:
                self._refused[key] = until
                self._refused.move_to_end(key)
                while len(self._refused) > MAX_REMEMBERED:
                    self._refused.popitem(last=False)
            else:
                self._verified[key] = (grant, until)
                self._verified.move_to_end(key)
                while len(self._verified) > MAX_REMEMBERED:
                    self._verified.popitem(last=False)


def _yield_the_cpu() -> None:
    """Run this hashing process at nice 19 and exit with the overlord.

    Password checks then take the CPU only when nothing else wants it.
    """
    os.nice(19)
    die_with_parent()


def _password_matches(password_hash: str, password: str) -> bool:
    """The argon2 check, in a hashing process."""
    try:
        return bool(_hasher.verify(password_hash, password))
    except (VerificationError, InvalidHashError):
        return False


def _basic_credentials(value: str) -> tuple[str, str] | None:
    """(user, password) of an HTTP Basic value; None if it is not base64 of UTF-8 ``user:password``."""
    try:
        user, colon, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError; so is a non-ASCII value
        return None
    return (user, password) if colon else None


class AuthMiddleware:
    """ASGI middleware: every request but liveness must carry credentials with the role it needs."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app, self.authenticator = app, authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            needed = required_role(scope["method"], scope["path"])
            if needed is not None:
                headers = [value for name, value in scope["headers"] if name == b"authorization"]
                if len(headers) > 1:  # which one counts would be a guess (a proxy may add its own)
                    await send_error(send, 400, f"{len(headers)} Authorization headers; send one")
                    return
                granted = await self.authenticator.check(headers[0].decode("latin-1") if headers else "")
                if granted == BUSY:
                    await _send_busy(send)
                    return
                if granted is None:
                    await send_error(send, 401, "authentication required: HTTP Basic (user and password) or a bearer "
                                            "token", [(b"www-authenticate", b'Basic realm="overlord"')])
                    return
                if needed == "write" and granted.role != "write":
                    await send_error(send, 403, f"{scope['method']} {scope['path']} needs the write role; these "
                                            "credentials have the read role")
                    return
                scope["user"], scope["role"] = granted.who, granted.role
        await self.app(scope, receive, send)


async def _send_busy(send: Send) -> None:
    """A 429 for a password check that found the queue full (Druid's capacity shape; retry in a second)."""
    content = json.dumps(druid_error(429, "too many password checks are waiting; retry in a second (credentials "
                                          "verified recently are not affected)", category="CAPACITY_EXCEEDED"))
    await send({"type": "http.response.start", "status": 429, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
        (b"retry-after", b"1")]})
    await send({"type": "http.response.body", "body": content.encode()})
