"""Small compactions run in low-priority processes of the overlord, never on a resident runner."""

from __future__ import annotations

import os
import random
from concurrent.futures.process import BrokenProcessPool
from functools import partial

import pytest

from indexing_task.compaction_job import compact
from indexing_task.low_priority import NICENESS, LowPriorityProcesses
from tests.helpers import events_spec
from tests.test_compaction import _queries
from tests.test_resident_runners import jobs_of
from tests.test_timeline import HOUR, T0, publish_random


@pytest.fixture()
def processes():
    started = LowPriorityProcesses(1)
    yield started
    started.close()


def test_a_small_compaction_runs_in_a_low_priority_process_without_a_spark_job(
        spark, engine, processes, datasource, deep_storage):
    """On a resident runner, a merge held the runner the next indexing task waited for (tasks' p95 went
    from 0.2-0.3 s to 1.1-1.9 s while twenty datasources compacted), and a runner that died in one
    failed the indexing tasks on the other runners.
    """
    rng = random.Random(9)
    for _ in range(4):
        publish_random(engine, deep_storage, datasource, rng, T0, 60, end=T0 + HOUR)
    before = _queries(spark, engine, datasource)
    spark.sparkContext.setJobGroup("a-small-compaction", "a small compaction")

    [report] = compact(spark, engine, events_spec(datasource), deep_storage, background=processes)

    assert jobs_of(spark, "a-small-compaction") == []  # no Spark job: the process did the work
    assert report.outcome.ok and report.input_segments == 4 and report.input_rows == 240
    assert processes.submit(partial(os.nice, 0)).result(30) == os.nice(0) + NICENESS
    spark.sparkContext.setJobGroup("queries", "the queries after")
    assert _queries(spark, engine, datasource) == before


def test_a_process_that_dies_fails_its_work_and_the_next_work_gets_a_new_one(processes):
    with pytest.raises(BrokenProcessPool):
        processes.submit(partial(os._exit, 3)).result(30)
    assert processes.submit(partial(os.getpid)).result(30) != os.getpid()
