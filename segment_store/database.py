"""Connections to the metadata store with every wait bounded.

A publish waits for the datasource's row lock; if the holder is a dead or paused overlord,
or the network to PostgreSQL is gone, nothing here waits forever: lock waits, statements and
idle transactions time out on the server, and TCP keepalives notice a vanished peer.
"""

from __future__ import annotations

import psycopg.errors
import sqlalchemy as sa

__all__ = ["is_bounded_wait_timeout", "metadata_engine"]


def metadata_engine(url: str, *, pool_size: int = 10, lock_timeout_s: float = 10.0,
                    statement_timeout_s: float = 300.0, idle_in_transaction_timeout_s: float = 60.0,
                    connect_timeout_s: int = 10) -> sa.Engine:
    """An engine for the metadata store whose sessions never wait without bound.

    They give up on a lock after ``lock_timeout_s``, on a statement after ``statement_timeout_s``
    and on an idle open transaction after ``idle_in_transaction_timeout_s``.
    """
    options = " ".join(f"-c {name}={round(seconds * 1000)}ms" for name, seconds in (
        ("lock_timeout", lock_timeout_s), ("statement_timeout", statement_timeout_s),
        ("idle_in_transaction_session_timeout", idle_in_transaction_timeout_s)))
    return sa.create_engine(url, pool_size=pool_size, pool_pre_ping=True, connect_args={
        "options": options, "connect_timeout": connect_timeout_s,
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3})


def is_bounded_wait_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL giving up a lock wait or a statement (a retryable condition)."""
    orig = getattr(exc, "orig", exc)
    return isinstance(orig, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled)
