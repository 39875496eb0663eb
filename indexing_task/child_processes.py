"""Every process the overlord starts dies with it and imports nothing from the working directory.

A process started with ``python -m ...`` or ``python -c ...`` puts its working directory first on
``sys.path``: the query engine, the resident runners' and Spark's Python workers would import a
user's ``specs/`` folder instead of the installed package (``PYTHONSAFEPATH``, Python 3.11, turns
that off, and children inherit it). A ``multiprocessing`` pool's process blocks on its queue and
never learns that its parent was SIGKILLed: it would stay with parent 1 for good, so each one
watches its parent. (Spark's JVM exits when the driver's end of its stdin closes, its Python
workers when the JVM goes; the query engine when its stdin closes.)
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["SAFE_PATH", "die_with_parent", "ignore_working_directory"]

SAFE_PATH = "PYTHONSAFEPATH"
"""Set (to 1) in a process's environment: no Python process started from it adds the working directory to sys.path."""

_PARENT_POLL_S = 0.5


def ignore_working_directory() -> None:
    """From now on, no Python process this one starts (or its children start) imports from the working directory."""
    os.environ[SAFE_PATH] = "1"


def die_with_parent() -> None:
    """Exit this process within :data:`_PARENT_POLL_S` of its parent's death (an initializer of pool processes).

    A thread compares the parent's pid with the one at start (a dead parent's children move to
    pid 1 or a subreaper); Linux's parent-death signal is not used: it fires when the *thread*
    that started the process ends, and pools start processes from short-lived threads.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)  # nothing to flush: the work in hand is lost with the overlord that wanted it

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
