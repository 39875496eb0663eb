"""Task slots are shared fairly: one datasource's many tasks never hold another's back.

A supervisor may plan up to ``taskCount`` x ``replicas`` tasks at once; first come, first served
would make every other datasource wait until all of them had run.
"""

from __future__ import annotations

import threading
from functools import partial

from overlord.supervisor.fair_executor import FairExecutor
from overlord.supervisor.task_runner import TaskRunner
from tests.helpers import wait_until


def _recorded(release: threading.Event, ran: list[str], name: str, block: bool = False):
    """Work named ``name`` that appends its name to ``ran`` when it runs (after ``release`` if ``block``)."""
    def run(_stop: threading.Event) -> str:
        if block:
            release.wait(30)
        ran.append(name)
        return name
    return run


def test_a_slot_goes_to_each_datasource_with_waiting_tasks_in_turn(spark, engine):
    runner = TaskRunner(spark, engine, slots=1)
    release, ran = threading.Event(), []
    work = partial(_recorded, release, ran)

    futures = [runner.submit_work("busy-0", "busy", work("busy-0", block=True), owner="busy")]
    futures += [runner.submit_work(f"busy-{i}", "busy", work(f"busy-{i}"), owner="busy") for i in range(1, 4)]
    futures.append(runner.submit_work("quiet-0", "quiet", work("quiet-0"), owner="quiet"))
    release.set()
    assert [f.result(30) for f in futures] == ["busy-0", "busy-1", "busy-2", "busy-3", "quiet-0"]
    assert ran == ["busy-0", "quiet-0", "busy-1", "busy-2", "busy-3"]
    runner.shutdown()


def test_shutdown_cancels_waiting_work_and_waits_for_running_work():
    executor = FairExecutor(1)
    started, release = threading.Event(), threading.Event()
    running = executor.submit("a", lambda: (started.set(), release.wait(30), "done")[-1])
    waiting = executor.submit("b", lambda: "never")
    started.wait(10)
    stopping = threading.Thread(target=executor.shutdown)
    stopping.start()
    wait_until(waiting.cancelled, "the waiting work to be cancelled", 10)
    assert stopping.is_alive()  # still waiting for the running work
    release.set()
    stopping.join(30)
    assert running.result() == "done" and not stopping.is_alive()


def test_compactions_wait_for_their_own_slots_and_never_hold_back_an_indexing_task(spark, engine):
    """Twenty datasources' compactions at once once held every task slot, and freshness p95 went 3.8 -> 10.6 s."""
    runner = TaskRunner(spark, engine, slots=1, compaction_slots=1)
    release, ran = threading.Event(), []
    work = partial(_recorded, release, ran)

    first = runner.submit_work("compact-a", "compaction", work("compact-a", block=True), owner="a", compaction=True)
    second = runner.submit_work("compact-b", "compaction", work("compact-b"), owner="b", compaction=True)
    task = runner.submit_work("index-c", "indexing", work("index-c"), owner="c")
    assert task.result(30) == "index-c"
    assert not second.done()  # the one compaction slot is taken
    assert runner.slot_use()["compaction_task"] == (1, 1, 1)
    release.set()
    assert (first.result(30), second.result(30)) == ("compact-a", "compact-b")
    assert ran == ["index-c", "compact-a", "compact-b"]
    runner.shutdown()


def test_shutdown_never_starts_a_queued_compaction(spark, engine):
    """A queued compaction once took the slot a stopped one freed and ran its whole job before shutdown
    returned, which delayed a standby's takeover.
    """
    runner = TaskRunner(spark, engine, slots=1, compaction_slots=1)
    started, ran = threading.Event(), []

    def running(stop: threading.Event) -> None:
        started.set()
        stop.wait(30)

    first = runner.submit_work("compact-a", "compaction", running, owner="a", compaction=True)
    queued = runner.submit_work("compact-b", "compaction", partial(_recorded, threading.Event(), ran)("compact-b"),
                                owner="b", compaction=True)
    assert started.wait(30)
    runner.shutdown()
    assert first.done() and queued.cancelled() and ran == []
