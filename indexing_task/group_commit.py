"""Group commit: tasks that finish while a publish is under way publish together in the next transaction.

Every task thread used to pay for a publish transaction of its own (~4 ms of the leader's CPU,
most of it in round trips). Here one thread publishes whatever has queued since its last
transaction (:func:`segment_store.publish.publish_many`): a lone task publishes at once, and a
burst costs a handful of statements however many datasources it holds. Nothing waits for a
batch to fill.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import sqlalchemy as sa

from indexing_task.step_costs import STEP_COSTS
from segment_store import DeepStorage, PublishOutcome, PublishRequest
from segment_store.publish import Publication, publish_many

__all__ = ["GroupCommit"]


class GroupCommit:
    """Publishes requests from any thread, those waiting together in one transaction."""

    def __init__(self, engine: sa.Engine, step_name: str = "publish.transaction") -> None:
        self.engine = engine
        self.step_name = step_name
        self.transactions = 0
        self.published = 0
        """Transactions run and requests published in them: more requests than transactions when tasks go together."""
        self._waiting: list[tuple[Publication, Future[PublishOutcome]]] = []
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def publish(self, request: PublishRequest, storage: DeepStorage | None = None) -> PublishOutcome:
        """:func:`segment_store.publish.publish` ``request``, with whatever else waits meanwhile."""
        future: Future[PublishOutcome] = Future()
        with self._changed:
            if self._closed:
                raise RuntimeError("the group commit has shut down")
            self._waiting.append(((request, storage), future))
            self._changed.notify()
        return future.result()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._closed:
                    self._changed.wait()
                if not self._waiting:
                    return
                batch, self._waiting = self._waiting, []
            try:
                with STEP_COSTS.step(self.step_name):
                    outcomes = publish_many(self.engine, [publication for publication, _ in batch])
            except BaseException as exc:  # the database unreachable: every task of the batch fails, as alone
                for _, future in batch:
                    future.set_exception(exc)
                continue
            self.transactions += 1
            self.published += len(batch)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                future.set_result(outcome)

    def close(self) -> None:
        """Publish what waits, then stop the thread."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()
