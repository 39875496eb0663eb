"""Leader election among overlords sharing one metadata store.

The leader holds a PostgreSQL session advisory lock on a connection of its own; PostgreSQL
releases it when that session ends (the process died, or the network to it is gone: server
and client TCP keepalives notice within ~11 s), and ends the session when it has been idle for
``LEASE_S`` (a leader stalled, e.g. stopped or paused, still answers keepalives from its kernel:
only its silence shows). The leader checks its session every ``poll_s``, which renews that
lease; standbys try to take the lock as often. A new leader claims the next leader epoch
(:func:`segment_store.leadership.claim_leadership`), which its tasks carry and the publish
transaction checks, so a deposed leader's in-flight tasks cannot publish. A leader that loses
its session deposes itself and stops its tasks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from segment_store.leadership import LEADER_LOCK_KEY, claim_leadership

__all__ = ["LeaderElector"]

logger = logging.getLogger(__name__)

LEASE_S = 15
"""A lock session silent this long is ended by PostgreSQL (``idle_session_timeout``): a stalled leader's lease."""
_SESSION_OPTIONS = ("-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 "
                    f"-c idle_session_timeout={LEASE_S * 1000}")
"""The lock session's server settings: a vanished leader's lock is released within ~11 s, a stalled one's
after ``LEASE_S``."""


class LeaderElector:
    """Keeps trying to lead this overlord.

    ``on_elected(epoch)`` and ``on_deposed()`` run on its thread (or in :meth:`try_elect`'s caller).
    """

    def __init__(self, url: str, name: str, on_elected: Callable[[int], None], on_deposed: Callable[[], None],
                 poll_s: float = 2.0) -> None:
        self.name = name
        self.poll_s = poll_s
        self._on_elected, self._on_deposed = on_elected, on_deposed
        self._engine = sa.create_engine(url, poolclass=NullPool, connect_args={
            "options": _SESSION_OPTIONS, "connect_timeout": 5,
            "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3})
        self._conn: sa.Connection | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self.epoch: int | None = None
        """The leader epoch while this overlord leads, else None."""

    @property
    def leading(self) -> bool:
        return self.epoch is not None

    def start(self) -> None:
        """Try once now (a lone overlord leads before this returns), then keep trying in the background."""
        self.try_elect()
        self._thread.start()

    def stop(self) -> None:
        """Stop trying and give up the lock (its session ends)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self._close()
        self._engine.dispose()

    def try_elect(self) -> None:
        """One round: take the lock if free (then claim an epoch), or check the session still holds it."""
        try:
            if self._conn is None:
                self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if self.leading:
                self._conn.execute(sa.select(1))  # the session, and so the lock, is still ours
                return
            if self._conn.execute(sa.select(sa.func.pg_try_advisory_lock(LEADER_LOCK_KEY))).scalar():
                self.epoch = claim_leadership(self._conn, self.name)  # one statement: atomic
                logger.info("%s is the leader (epoch %d)", self.name, self.epoch)
                self._on_elected(self.epoch)
        except sa.exc.DBAPIError as exc:
            logger.warning("%s: leader-election session lost: %s", self.name, exc)
            self._close()
            if self.leading:
                self.epoch = None
                logger.warning("%s is no longer the leader", self.name)
                self._on_deposed()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.try_elect()

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sa.exc.DBAPIError:
                pass
            self._conn = None
