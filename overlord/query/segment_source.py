"""Segment files as a Spark DataFrame read through fsspec, for queries over object stores.

Spark's own Parquet reader needs a Hadoop connector for ``s3://`` (``hadoop-aws`` and the AWS
SDK, which PySpark does not ship). This source reads the same files with s3fs, as the indexing
and compaction workers write them: one ``mapInArrow`` task per share of the files, whose Python
worker streams their row groups as Arrow batches (a plain job, so it works on any session; a
registered Python data source is visible only to the session that registered it). The schema is
the union of the files' (read from their footers); columns a file lacks (a dimension added by a
later spec) are read as nulls. There is no column pruning:
a query reads whole files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

__all__ = ["footer_schema", "read_segments"]

_FOOTER_CACHE_SIZE = 100_000
_footers: dict[str, pa.Schema] = {}


def footer_schema(path: str, storage_options: Mapping[str, Any] | None = None) -> pa.Schema:
    """A segment file's schema, read from its footer once (segment files never change)."""
    schema = _footers.get(path)
    if schema is None:
        fs, file = url_to_fs(path, **dict(storage_options or {}))
        with fs.open(file, "rb") as f:
            schema = pq.read_schema(f)
        if len(_footers) >= _FOOTER_CACHE_SIZE:
            _footers.clear()
        _footers[path] = schema
    return schema


def read_segments(spark: SparkSession, paths: Sequence[str], storage_options: Mapping[str, Any] | None = None,
                  schema: StructType | None = None) -> DataFrame:
    """A DataFrame over ``paths`` whose schema is the union of theirs (a column a file lacks is null).

    A given ``schema`` (say, of a superset of ``paths``) is used instead; no footer is read then.
    """
    options = dict(storage_options or {})
    if schema is None:
        with ThreadPoolExecutor(16) as pool:  # footers are small reads; on object stores mostly waiting
            schema = from_arrow_schema(pa.unify_schemas(list(pool.map(partial(footer_schema, storage_options=options),
                                                                      paths))))
    shares = min(len(paths), 2 * spark.sparkContext.defaultParallelism)
    read = partial(_read_share, list(paths), shares, options, schema)
    return spark.range(0, shares, 1, shares).mapInArrow(read, schema)


def _read_share(paths: list[str], shares: int, storage_options: dict[str, Any], schema: StructType,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each input row is the index of one share of the files (every ``shares``-th)."""
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    for batch in batches:
        for share in batch.column(0).to_pylist():
            for path in paths[share::shares]:
                fs, file = url_to_fs(path, **storage_options)
                with fs.open(file, "rb") as f:
                    for row_group in pq.ParquetFile(f).iter_batches(batch_size=65_536):
                        yield _conform(row_group, arrow_schema)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns and types (nulls for a column it lacks)."""
    columns = [batch.column(field.name).cast(field.type) if field.name in batch.schema.names
               else pa.nulls(batch.num_rows, field.type) for field in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
