"""Deep storage on ``s3://`` end to end: moto's S3 server on loopback, s3fs in the Spark workers,
indexing and SQL.

The endpoint and credentials reach the workers through ``storage_options``, not the
environment: local-mode Python workers inherit the environment of the Spark JVM, which the
session-scoped ``spark`` fixture started before this module could set anything. (In
production, ``AWS_ENDPOINT_URL`` and credentials exported before the overlord starts do reach
the workers.) The ``AWS_*`` variables below only keep the driver off real credentials.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from moto.server import ThreadedMotoServer

from indexing_task.task import run_index_task
from overlord.dev.sample_data import make_sample_events, produce
from overlord.dev.stack import free_port
from overlord.query.engine import execute_sql
from overlord.supervisor.ranges import next_task_request
from segment_store import DeepStorage, used_segments
from tests.helpers import assert_exact, events_spec, settings_for


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[dict[str, Any], s3fs.S3FileSystem]]:
    """A moto S3 server on loopback: ``(storage_options, filesystem)``."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                mp.setenv(name, "testing")
            mp.setenv("AWS_DEFAULT_REGION", "eu-west-1")
            mp.delenv("AWS_PROFILE", raising=False)
            host, port = server.get_host_and_port()
            options = {"key": "testing", "secret": "testing",
                       "client_kwargs": {"endpoint_url": f"http://{host}:{port}", "region_name": "eu-west-1"}}
            yield options, s3fs.S3FileSystem(skip_instance_cache=True, **options)
    finally:
        server.stop()


def test_index_to_s3_publishes_exact_segments(stack, engine, spark, make_topic, datasource, s3):
    options, fs = s3
    bucket = f"segments-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    root = f"s3://{bucket}/segments"
    topic = make_topic(2)
    sample = make_sample_events(4_000, bad_every=1_000)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    request = next_task_request(engine, settings_for(stack, root), events_spec(datasource, topic))

    report = run_index_task(spark, engine, replace(request, storage_options=options))

    assert report.outcome.status == "ok", report.outcome.message
    assert report.records == len(sample.records) and report.unparseable == sample.bad == 4
    segments = used_segments(engine, datasource)
    assert segments and all(seg.path.startswith(f"{root}/{datasource}/") for seg in segments)
    fs.invalidate_cache()
    in_bucket = {f"s3://{key}": info["size"] for key, info in fs.find(root, detail=True).items()}
    assert in_bucket == {seg.path: seg.size_bytes for seg in segments}
    table = pa.concat_tables(pq.read_table(seg.path, filesystem=fs) for seg in segments)
    assert table.num_rows == report.rows_out
    assert_exact(table, sample)

    # SQL reads the same files from S3 (through s3fs: PySpark has no S3 connector of its own).
    result = execute_sql(spark, engine, f'SELECT country, SUM("count") AS n, SUM(value_sum) AS v, COUNT(*) AS rows '
                         f'FROM "{datasource}" GROUP BY country', storage_options=options)
    rows = result.table.to_pylist()
    assert {r["country"]: (r["n"], r["v"]) for r in rows} == {
        c: (n, sample.value_by_country[c]) for c, n in sample.count_by_country.items()}
    assert sum(r["rows"] for r in rows) == report.rows_out


def test_makedirs_does_not_create_a_missing_bucket(s3):
    options, fs = s3
    storage = DeepStorage("s3://no-such-bucket/segments/", options)
    assert storage.root == "s3://no-such-bucket/segments"

    storage.makedirs_for(f"{storage.root}/ds/interval/attempt/part-00000.parquet")

    fs.invalidate_cache()
    assert not fs.exists("no-such-bucket")
