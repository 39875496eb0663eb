"""A Spark data source that reads segment files through fsspec, for queries over object stores.

Spark's own Parquet reader needs a Hadoop connector for ``s3://`` (``hadoop-aws`` and the AWS
SDK, which PySpark does not ship). This source reads the same files with s3fs, as the indexing
and compaction workers write them: each Spark partition gets a share of the files, and its
Python worker streams their row groups as Arrow batches. Columns a file lacks (a dimension
added by a later spec) are read as nulls. There is no column pruning: a query reads whole files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

__all__ = ["read_segments"]

_FORMAT = "overlord_segments"


def read_segments(spark: SparkSession, paths: Sequence[str], storage_options: Mapping[str, Any] | None = None
                  ) -> DataFrame:
    """A DataFrame over ``paths`` (their schema is the first file's, as Spark's Parquet reader does)."""
    options = dict(storage_options or {})
    fs, first = url_to_fs(paths[0], **options)
    with fs.open(first, "rb") as f:
        schema = from_arrow_schema(pq.read_schema(f))
    spark.dataSource.register(_SegmentFiles)
    partitions = min(len(paths), 2 * spark.sparkContext.defaultParallelism)
    return (spark.read.format(_FORMAT).schema(schema)
            .option("paths", json.dumps(list(paths))).option("partitions", str(partitions))
            .option("storage_options", json.dumps(options)).load())


class _SegmentFiles(DataSource):
    @classmethod
    def name(cls) -> str:
        return _FORMAT

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self.options, schema)


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.paths: list[str] = json.loads(options["paths"])
        self.partition_count = int(options["partitions"])
        self.storage_options: dict[str, Any] = json.loads(options["storage_options"])
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(self.paths[i::self.partition_count]) for i in range(self.partition_count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = to_arrow_schema(self.schema, timezone="UTC")
        for path in partition.value:
            fs, file = url_to_fs(path, **self.storage_options)
            with fs.open(file, "rb") as f:
                for batch in pq.ParquetFile(f).iter_batches(batch_size=65_536):
                    yield _conform(batch, schema)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns and types (nulls for a column it lacks)."""
    columns = [batch.column(field.name).cast(field.type) if field.name in batch.schema.names
               else pa.nulls(batch.num_rows, field.type) for field in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
