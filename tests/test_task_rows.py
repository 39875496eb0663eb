"""Task rows written behind (issue 51) against real PostgreSQL: batched, merged, never missed by a reader."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.metadata_store import tasks as tasks_t


def _counting(engine: sa.Engine, statements: list[str]) -> sa.Engine:
    counting = sa.create_engine(engine.url)
    sa.event.listen(counting, "before_cursor_execute",
                    lambda _c, _cur, statement, *_: statements.append(statement) if "tasks" in statement else None)
    return counting


def _row(engine: sa.Engine, task_id: str) -> dict[str, Any] | None:
    with engine.connect() as conn:
        row = conn.execute(sa.select(tasks_t).where(tasks_t.c.id == task_id)).mappings().one_or_none()
    return None if row is None else dict(row)


def test_tasks_launched_and_finished_between_two_writes_are_one_statement(engine: sa.Engine) -> None:
    statements: list[str] = []
    counting = _counting(engine, statements)
    store = MetadataStore(counting)
    store.task_rows.interval_s = 3600  # only flushes write
    ids = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(20)]
    try:
        for i, task_id in enumerate(ids):
            store.insert_task(task_id, "sup", "ds", {0: i}, {0: i + 1})
        for task_id in ids[:15]:
            store.finish_task(task_id, "SUCCESS", "published", {"records": 1}, "a log line")
        assert statements == [] and _row(engine, ids[0]) is None  # queued, nothing written yet
        store.task_rows.flush()
        assert len(statements) == 2  # the finished ones in one insert, the running ones in another
        for task_id in ids[15:]:
            store.finish_task(task_id, "FAILED", "publish fatal: x", None)
        record = store.task(ids[19])  # a reader flushes first: never misses what was queued
        assert len(statements) == 4  # the update of the five, then the read
        assert record is not None and record.status == "FAILED" and record.status_detail == "publish fatal: x"
        first = _row(engine, ids[0])
        assert first is not None and (first["status"], first["report"], first["log"]) == (
            "SUCCESS", {"records": 1}, "a log line")
        assert first["created_at"] <= first["finished_at"]
        assert [t.id for t in store.tasks(datasource="ds", limit=1000) if t.id in ids] != []
    finally:
        store.task_rows.close()
        counting.dispose()


def test_rows_queued_while_the_database_is_down_are_written_when_it_is_back(engine: sa.Engine) -> None:
    broken = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    store = MetadataStore(broken)
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    store.insert_task(task_id, "sup", "ds", {0: 0}, {0: 1})
    store.finish_task(task_id, "SUCCESS", "published", None)
    try:
        store.task_rows.flush()
    except sa.exc.OperationalError:
        pass
    else:
        raise AssertionError("the write should have failed")
    store.task_rows.engine = engine  # the database is back
    store.task_rows.flush()
    row = _row(engine, task_id)
    assert row is not None and row["status"] == "SUCCESS"
    store.task_rows.close()
    broken.dispose()
