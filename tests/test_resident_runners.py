"""Resident runners: small tasks run on a long-lived Spark task, exactly as a Spark job would run them."""

from __future__ import annotations

import threading
from dataclasses import replace
from multiprocessing.connection import AuthenticationError, Client

import pytest

from indexing_task.resident import ResidentRunners, RunnerLost
from indexing_task.task import run_index_task
from indexing_task.task_errors import TaskStopped
from overlord.dev.sample_data import make_sample_events, produce
from overlord.supervisor.task_ranges import next_task_request
from segment_store import committed_offsets
from tests.helpers import assert_exact, events_spec, published_table, settings_for, wait_until


@pytest.fixture()
def runners(spark):
    started = ResidentRunners(spark, 1)
    started.restart_delay_s = 0.5
    wait_until(lambda: started.idle == 1, "the resident runner to connect", 60)
    yield started
    started.close()


def jobs_of(spark, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_a_small_task_runs_on_a_resident_runner_without_a_spark_job(
        stack, engine, spark, runners, make_topic, datasource, deep_storage):
    topic = make_topic(2)
    sample = make_sample_events(600)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    spark.sparkContext.setJobGroup(request.task_id, "a small task")
    produce(stack.bootstrap_servers, topic, make_sample_events(100).records, 2)  # past the range's end
    grown = {p: end + 50 for p, end in request.end_offsets.items()}

    report = run_index_task(spark, engine, request, resident=runners)

    assert report.outcome.ok and report.records == len(sample.records)
    assert report.high_watermarks == grown  # how far the partitions reached when read (the supervisor's lag)
    assert jobs_of(spark, request.task_id) == []  # no Spark job: the runner did the work
    assert_exact(published_table(engine, datasource), sample)
    assert runners.idle == 1  # back, waiting for the next task
    retry = replace(request, task_id=request.task_id + "-spark")
    spark.sparkContext.setJobGroup(retry.task_id, "the same range as a Spark job")
    again = run_index_task(spark, engine, retry)
    assert again.outcome.status == "already_published" and again.high_watermarks == grown
    assert len(jobs_of(spark, retry.task_id)) == 1


def test_a_task_read_to_the_end_runs_on_a_resident_runner_however_far_it_may_read(
        stack, engine, spark, runners, make_topic, datasource, deep_storage):
    """Its end is a cap (a backlog's worth), not what it will read: still one small task, no Spark job."""
    topic = make_topic(2)
    sample = make_sample_events(60)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    planned = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    request = replace(planned, end_offsets={p: o + 2_500_000 for p, o in planned.start_offsets.items()},
                      read_to_end=True)
    spark.sparkContext.setJobGroup(request.task_id, "a task read to the end")

    report = run_index_task(spark, engine, request, resident=runners)

    assert report.outcome.ok and report.records == len(sample.records)
    assert jobs_of(spark, request.task_id) == []
    assert_exact(published_table(engine, datasource), sample)


def test_a_runner_that_dies_fails_only_its_task_and_is_started_again(
        stack, engine, spark, runners, make_topic, datasource, deep_storage):
    topic = make_topic(1)
    sample = make_sample_events(300)
    produce(stack.bootstrap_servers, topic, sample.records[:200], 1)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    waiting = replace(request, end_offsets={0: len(sample.records)})  # the runner waits for the rest
    outcome: list[BaseException | None] = []
    task = threading.Thread(target=lambda: outcome.append(_error_of(spark, engine, waiting, runners)))
    task.start()
    wait_until(lambda: runners.idle == 0, "the runner to take the task", 30)
    spark.sparkContext.cancelJobGroup(runners.job_group)  # its Python worker is killed mid-read
    task.join(60)

    assert isinstance(outcome[0], RunnerLost), outcome
    assert committed_offsets(engine, datasource).offsets == {0: 0}  # nothing published
    wait_until(lambda: runners.idle == 1, "the runner to be started again", 60)
    produce(stack.bootstrap_servers, topic, sample.records[200:], 1)
    report = run_index_task(spark, engine, replace(waiting, task_id=waiting.task_id + "-again"), resident=runners)
    assert report.outcome.ok
    assert_exact(published_table(engine, datasource), sample)


def _error_of(spark, engine, request, runners) -> BaseException | None:
    try:
        run_index_task(spark, engine, request, resident=runners)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return exc
    return None


def test_a_worker_error_reaches_the_driver_as_raised(stack, engine, spark, runners, make_topic, datasource,
                                                     deep_storage):
    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, make_sample_events(10).records, 1)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    missing = replace(request, spec=events_spec(datasource, "no-such-topic"))
    with pytest.raises(Exception, match=r"no-such-topic\[0\]"):
        run_index_task(spark, engine, missing, resident=runners)
    assert runners.idle == 1  # the runner survived its task's error


def test_a_connection_without_the_key_is_refused_and_the_runner_keeps_working(
        stack, engine, spark, runners, make_topic, datasource, deep_storage):
    address = runners._listener.address
    with pytest.raises(AuthenticationError):
        Client(address, authkey=b"not the key")
    assert runners.idle == 1
    topic = make_topic(1)
    sample = make_sample_events(50)
    produce(stack.bootstrap_servers, topic, sample.records, 1)
    request = next_task_request(engine, settings_for(stack, deep_storage), events_spec(datasource, topic))
    assert run_index_task(spark, engine, request, resident=runners).outcome.ok
    assert_exact(published_table(engine, datasource), sample)


def test_a_task_waits_its_turn_while_the_runner_turns_over_work_and_runs_as_a_spark_job_only_if_it_is_stuck(
        stack, engine, spark, runners, make_topic, datasource, deep_storage):
    """Two tasks ahead on the one runner make a third wait longer than ``wait_s``: it still waits (a Spark job
    costs more CPU than the wait at a trickle), since the runner came back within ``wait_s``. A runner held by
    one task for ``wait_s`` sends the next to a Spark job.
    """
    runners.wait_s = 3.0
    settings = settings_for(stack, deep_storage)
    ahead, rests = [], []
    for name in ("first", "second"):  # each waits on the runner for records produced later
        topic = make_topic(1)
        sample = make_sample_events(200)
        produce(stack.bootstrap_servers, topic, sample.records[:100], 1)
        request = next_task_request(engine, settings, events_spec(f"{datasource}_{name}", topic))
        ahead.append(replace(request, end_offsets={0: 200}))
        rests.append((topic, sample.records[100:]))
    last_topic = make_topic(1)
    produce(stack.bootstrap_servers, last_topic, make_sample_events(50).records, 1)
    last = next_task_request(engine, settings, events_spec(f"{datasource}_last", last_topic))

    reports: dict[str, object] = {}

    def run(request) -> None:
        spark.sparkContext.setJobGroup(request.task_id, "queued on the runner")
        reports[request.task_id] = _error_of(spark, engine, request, runners) or "ok"

    threads = [threading.Thread(target=run, args=(request,)) for request in (*ahead, last)]
    threads[0].start()
    wait_until(lambda: runners.idle == 0, "the runner to take the first task", 30)
    for thread in threads[1:]:
        thread.start()
        threading.Event().wait(0.3)  # in this order on the runner's queue
    for topic, records in rests:  # each task ahead holds the runner for ~2 s
        threading.Event().wait(2.0)
        produce(stack.bootstrap_servers, topic, records, 1)
    for thread in threads:
        thread.join(60)

    assert all(reports[r.task_id] == "ok" for r in (*ahead, last)), reports
    assert [jobs_of(spark, r.task_id) for r in (*ahead, last)] == [[], [], []]  # all three on the runner

    stuck = replace(ahead[0], task_id=ahead[0].task_id + "-stuck", start_offsets={0: 200}, end_offsets={0: 201})
    holder = threading.Thread(target=run, args=(stuck,))  # waits for a record that comes only at the end
    holder.start()
    wait_until(lambda: runners.idle == 0, "the runner to take the stuck task", 30)
    produce(stack.bootstrap_servers, last_topic, make_sample_events(20).records, 1)
    late = next_task_request(engine, settings, events_spec(f"{datasource}_last", last_topic))
    run(late)
    assert reports[late.task_id] == "ok" and len(jobs_of(spark, late.task_id)) == 1  # a Spark job, after wait_s
    produce(stack.bootstrap_servers, rests[0][0], make_sample_events(1).records, 1)
    holder.join(60)


def test_a_task_stopped_while_it_waits_for_a_runner_runs_nowhere(stack, engine, spark, runners, make_topic, datasource,
                                                                 deep_storage):
    topic = make_topic(1)
    produce(stack.bootstrap_servers, topic, make_sample_events(100).records, 1)
    settings = settings_for(stack, deep_storage)
    request = next_task_request(engine, settings, events_spec(datasource, topic))
    stuck = replace(request, task_id=request.task_id + "-stuck", end_offsets={0: 101})  # one record never comes
    holder = threading.Thread(target=_error_of, args=(spark, engine, stuck, runners))
    holder.start()
    wait_until(lambda: runners.idle == 0, "the runner to take the stuck task", 30)
    stopped = threading.Event()
    stopped.set()  # a reset or a shutdown, while the task waits for a slot on the runner
    spark.sparkContext.setJobGroup(request.task_id, "a stopped task")

    with pytest.raises(TaskStopped):
        run_index_task(spark, engine, request, stopped, resident=runners)
    assert jobs_of(spark, request.task_id) == []  # neither a Spark job nor the runner's time
    produce(stack.bootstrap_servers, topic, make_sample_events(1).records, 1)
    holder.join(60)


def test_tasks_that_wait_for_the_runner_go_together_and_each_succeeds_or_fails_alone(
        stack, engine, spark, runners, make_topic, datasource, deep_storage, tmp_path):
    """While the one runner is held, three tasks queue. The runner takes them in one request (one consumer, one
    fetch for all their ranges): two publish exactly what they read, and the one whose files cannot be written
    fails alone and publishes nothing.
    """
    settings = settings_for(stack, deep_storage)
    hold_topic = make_topic(1)
    produce(stack.bootstrap_servers, hold_topic, make_sample_events(100).records, 1)
    hold = replace(next_task_request(engine, settings, events_spec(f"{datasource}_hold", hold_topic)),
                   end_offsets={0: 101})  # one record more than there is: the runner waits for it
    samples, queued = [], []
    for name in ("a", "b", "unwritable"):
        topic = make_topic(2)
        samples.append(make_sample_events(300))
        produce(stack.bootstrap_servers, topic, samples[-1].records, 2)
        queued.append(next_task_request(engine, settings, events_spec(f"{datasource}_{name}", topic)))
    (tmp_path / "a-file").write_text("")
    queued[2] = replace(queued[2], deep_storage=str(tmp_path / "a-file" / "segments"))
    outcomes: dict[str, object] = {}

    def run(request) -> None:
        spark.sparkContext.setJobGroup(request.task_id, "a task for the runner")
        outcomes[request.task_id] = _error_of(spark, engine, request, runners) or "ok"

    holder = threading.Thread(target=run, args=(hold,))
    holder.start()
    wait_until(lambda: runners.idle == 0, "the runner to take the held task", 30)
    sent = runners.requests_sent, runners.tasks_sent
    threads = [threading.Thread(target=run, args=(request,)) for request in queued]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(runners._waiting) == 3, "the three tasks to wait for the runner", 30)
    produce(stack.bootstrap_servers, hold_topic, make_sample_events(1).records, 1)
    for thread in (holder, *threads):
        thread.join(60)

    assert (runners.requests_sent - sent[0], runners.tasks_sent - sent[1]) == (1, 3)  # the three went together
    assert outcomes[hold.task_id] == "ok"
    for request, sample in zip(queued[:2], samples, strict=False):
        assert outcomes[request.task_id] == "ok" and jobs_of(spark, request.task_id) == []
        assert_exact(published_table(engine, request.spec.datasource), sample)
    assert isinstance(outcomes[queued[2].task_id], NotADirectoryError)
    assert committed_offsets(engine, queued[2].spec.datasource).offsets == {0: 0, 1: 0}  # where it started


def test_runners_that_would_hold_every_local_slot_are_refused_at_once(spark):
    """Two benchmarks gave the overlord a ``local[*]`` Spark without slots for its runners: the runners held
    both cores, no indexing job ever got a slot, and the supervisor lagged forever without a word.
    """
    slots = int(spark.sparkContext.master.removeprefix("local[").removesuffix("]"))  # conftest's: local[2] + 4

    with pytest.raises(ValueError, match=rf"local\[{slots}\] has {slots} task slots.*resident_slots"):
        ResidentRunners(spark, slots)
