"""The metadata store's schema is migrated, never recreated: a 0.1.0 store (built from its
``pg_dump``) is upgraded in place and keeps every row, a new store gets exactly the tables the
code declares, several overlords starting at once migrate once, and a store a newer release
migrated is refused rather than written to.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from overlord.supervisor.metadata_store import MetadataStore
from overlord.supervisor.metadata_store import metadata as overlord_tables
from segment_store import committed_offsets, visible_segments
from segment_store.migrate import SchemaTooNew, current_revision, head_revision, upgrade_schema
from segment_store.schema import metadata as segment_tables

RELEASE_0_1_0 = Path(__file__).parent / "fixtures" / "metadata_schema_0.1.0.sql"

ROWS_0_1_0 = {  # one row per table, as 0.1.0 wrote them
    "segments": {"id": "events_a_0", "datasource": "events", "interval_start": "2026-11-01T00:00:00+00:00",
                 "interval_end": "2026-11-01T01:00:00+00:00", "version": 1, "partition_num": 0,
                 "path": "/deep/events/a/part-0.parquet", "size_bytes": 2048, "num_rows": 17, "used": True,
                 "descriptor": {"publishedBy": "task-1"}},
    "datasource_offsets": {"datasource": "events", "topic": "wiki", "offsets": {"0": 17, "1": 4}},
    "partition_topic_ids": {"datasource": "events", "partition": "0", "topic_id": "aBcD"},
    "leadership": {"id": 1, "epoch": 3, "leader": "http://overlord-0:8090"},
    "supervisor_specs": {"id": "events", "spec": {"type": "kafka", "spec": {"dataSchema": {"dataSource": "events"}}}},
    "tasks": {"id": "task-1", "supervisor_id": "events", "datasource": "events", "status": "SUCCESS",
              "start_offsets": {"0": 0}, "end_offsets": {"0": 17}},
    "compaction_configs": {"datasource": "events", "config": {"dataSource": "events"}},
    "retention_rules": {"datasource": "_default", "rules": [{"type": "loadForever"}]},
}


@pytest.fixture
def fresh(engine: sa.Engine) -> Iterator[sa.Engine]:
    """An empty database of its own on the test PostgreSQL."""
    name = f"migrate_{uuid.uuid4().hex[:10]}"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    database = sa.create_engine(engine.url.set(database=name), pool_size=4)
    try:
        yield database
    finally:
        database.dispose()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")


def differences(engine: sa.Engine) -> list[Any]:
    """What Alembic's autogenerate finds between the store and the tables the code declares."""
    declared = sa.MetaData()
    for table in (*segment_tables.tables.values(), *overlord_tables.tables.values()):
        table.to_metadata(declared)
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), declared))


def _insert(conn: sa.Connection, table: str, row: dict[str, Any]) -> None:
    columns = ", ".join(row)
    values = ", ".join(f"CAST(:{c} AS jsonb)" if isinstance(v, dict | list) else f":{c}" for c, v in row.items())
    conn.execute(sa.text(f"INSERT INTO {table} ({columns}) VALUES ({values})"),
                 {c: json.dumps(v) if isinstance(v, dict | list) else v for c, v in row.items()})


def _as_written(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def test_a_new_store_gets_exactly_the_tables_the_code_declares(fresh):
    assert current_revision(fresh) is None
    assert upgrade_schema(fresh) is None
    assert current_revision(fresh) == head_revision()
    assert differences(fresh) == []
    assert upgrade_schema(fresh) == head_revision()  # again: nothing to do


def test_a_0_1_0_store_is_upgraded_in_place_and_keeps_every_row(fresh):
    with fresh.begin() as conn:
        conn.exec_driver_sql(RELEASE_0_1_0.read_text())
        for table, row in ROWS_0_1_0.items():
            _insert(conn, table, row)
    assert current_revision(fresh) is None

    assert upgrade_schema(fresh) is None
    assert current_revision(fresh) == head_revision()
    assert differences(fresh) == []
    with fresh.connect() as conn:
        for table, row in ROWS_0_1_0.items():
            [found] = conn.execute(sa.text(f"SELECT * FROM {table}")).mappings().all()
            assert {c: _as_written(found[c]) for c in row} == row, table
    # and the code reads them back
    assert committed_offsets(fresh, "events").offsets.to_json() == {"0": 17, "1": 4}
    assert [s.id for s in visible_segments(fresh, "events")] == ["events_a_0"]
    assert [(r.id, r.author) for r in MetadataStore(fresh).history("events")] == [("events", None)]  # before 0002


def test_overlords_starting_at_once_migrate_once(fresh):
    with ThreadPoolExecutor(4) as pool:
        before = [done.result(60) for done in [pool.submit(upgrade_schema, fresh) for _ in range(4)]]
    assert Counter(before) == {None: 1, head_revision(): 3}  # one migrated; the others waited, then found it done
    assert differences(fresh) == []


def test_a_store_a_newer_release_migrated_is_refused(fresh):
    upgrade_schema(fresh)
    with fresh.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(SchemaTooNew, match="revision 9999.*newer release"):
        upgrade_schema(fresh)
    assert current_revision(fresh) == "9999"  # untouched


def test_overlord_db_upgrade_and_current_say_where_the_store_is(fresh, monkeypatch, capsys):
    from overlord.cli import main

    monkeypatch.setenv("OVERLORD_DATABASE_URL", fresh.url.render_as_string(hide_password=False))
    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out.startswith("none ")
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out.strip() == f"metadata store at revision {head_revision()} (was none)"
    assert main(["db", "upgrade"]) == 0
    assert capsys.readouterr().out.strip() == f"metadata store at revision {head_revision()} already"
    assert main(["db", "current"]) == 0
    assert capsys.readouterr().out.startswith(f"{head_revision()} ")
    assert main(["db", "current", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"revision": head_revision(), "head": head_revision()}
