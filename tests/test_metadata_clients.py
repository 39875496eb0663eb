"""The supervisor loop's metadata clients are kept per set of properties, and closed only when no call uses them."""

from __future__ import annotations

import threading

import pytest

from indexing_task import watermarks
from indexing_task.watermarks import _Clients


class Client:
    def __init__(self, properties: dict) -> None:
        self.properties = properties


def test_clients_are_kept_evicted_and_closed_after_their_call(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[Client] = []
    monkeypatch.setattr(watermarks, "_close", closed.append)
    clients = _Clients(Client, size=2)
    with clients.use({"a": 1}) as first:
        pass
    with clients.use({"a": 1}) as again:
        assert again is first  # kept, not made again
    in_call, release = threading.Event(), threading.Event()

    def long_call() -> None:
        with clients.use({"a": 1}):
            in_call.set()
            release.wait(10)

    caller = threading.Thread(target=long_call)
    caller.start()
    in_call.wait(10)
    closing = threading.Thread(target=clients.close)
    closing.start()
    closing.join(0.5)
    assert closing.is_alive() and closed == []  # waits for the call in flight
    release.set()
    closing.join(10)
    caller.join(10)
    assert closed == [first]
    for n in range(3):
        with clients.use({"b": n}):
            pass
    assert [c.properties for c in closed[1:]] == [{"b": 0}]  # the least recently used, past size 2
    with pytest.raises(ValueError), clients.use({"b": 2}) as failing:
        raise ValueError("broker unreachable")
    assert closed[-1] is failing
    with clients.use({"b": 2}) as fresh:
        assert fresh is not failing
