"""Parse JSON records in bulk and roll them up, with DuckDB over Arrow.

One SQL query per batch of raw record values types every field, gives each bad record a
reason (invalid JSON, missing or invalid timestamp, wrong type) and groups the good rows by
(segment interval, truncated time, dimensions), aggregating the metrics; nothing is
materialised in between (bad records come out of the same pass, one row each).
String dimensions take any JSON scalar as text (``true``, ``12``), like Druid; a JSON array makes the
dimension multi-value (a list column, never the array's text; an object is kept as its JSON text,
where Druid keeps Java's rendering of it). Sketch metrics come out of the pass as lists of values
that :mod:`indexing_task.sketch_columns` turns into sketches; first/last metrics as (time, value) pairs.
Partial results of several batches merge with the metrics' combining functions.

The schema is :mod:`indexing_task.rollup_schema`'s; the query is built by :mod:`indexing_task.parse_sql`
and :mod:`indexing_task.aggregate_sql`; partials are completed for merging by :mod:`indexing_task.partial_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexing_task.aggregate_sql import aggregate_sql
from indexing_task.arrow_queries import arrow_query, thread_database
from indexing_task.buckets import bucket_end, bucket_end_sql
from indexing_task.field_discovery import discovered_schema
from indexing_task.field_sql import metadata_column
from indexing_task.multi_value_sql import array_reason
from indexing_task.parse_sql import bounds_sql, parse_sql
from indexing_task.partial_rows import sketched, with_every_dimension
from indexing_task.rollup_schema import SEGMENT_START, TIME, RollupSchema
from indexing_task.sketch_columns import build_sketches, merge_sketches
from indexing_task.sql_text import quote_identifier as _q
from indexing_task.value_decoders import parse_input

__all__ = ["BadRecord", "ParsedBatch", "Rollup"]

_AUX_COLUMNS = ["__status", "__bad_i", "__reason", "__n"]
_SAMPLE_LIMIT = 20


def _text(value: bytes | None) -> str:
    """Decode a record value for a bad-record sample ('' for a null value or invalid UTF-8)."""
    if value is None:
        return ""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return ""



@dataclass(frozen=True)
class BadRecord:
    """A record that was skipped, by its index in the batch."""

    index: int
    reason: str
    value: str


@dataclass(frozen=True)
class ParsedBatch:
    """The outcome of one batch: its rolled-up rows and the records it could not use."""

    rows: pa.Table
    bad_count: int
    bad_samples: tuple[BadRecord, ...]
    thrown_away: int


class Rollup:
    """Parses and rolls up batches of raw JSON values against one schema (one DuckDB cursor).

    Records whose event time (before truncation) is outside ``[min_time, max_time]`` are thrown away.

    The cursor belongs to its thread's database, which Rollups created one after another
    (the splits a Spark Python worker runs) share.
    """

    def __init__(self, schema: RollupSchema, min_time: datetime | None = None,
                 max_time: datetime | None = None) -> None:
        self._con = thread_database().cursor()
        self._con.execute("SET TimeZone = 'UTC'")
        self._bounds = bounds_sql(min_time, max_time)
        self._use(schema)

    def _use(self, schema: RollupSchema) -> None:
        """Parse with ``schema`` from now on (discovery adds dimensions to it)."""
        self.schema = schema
        self._queries: dict[tuple[pa.StructType | None, bool], str] = {}

    def _parse_query(self, value_type: pa.StructType | None, arrays: bool = True) -> str:
        """The parse and rollup query for batches of JSON text, or of typed rows of ``value_type``.

        ``arrays=False``: the batch's JSON text holds no ``[`` (:func:`indexing_task.parse_sql.parse_sql`).
        """
        key = (value_type, arrays)
        if key not in self._queries:
            classified = (f"(SELECT *, CASE WHEN __reason IS NOT NULL THEN 1 "
                          f"WHEN NOT __kept OR NOT ({self._bounds}) THEN 2 ELSE 0 END "
                          f"AS __status FROM ({parse_sql(self.schema, self._bounds, value_type, arrays)}))")
            self._queries[key] = aggregate_sql(self.schema, classified, combine=False, status=True)
        return self._queries[key]

    def _discover(self, typed: bool) -> None:
        """Add the batch's top-level fields not seen before as dimensions (``batch`` is registered)."""
        schema = discovered_schema(self._con, self.schema, typed)
        if schema is not self.schema:
            self._use(schema)

    def close(self) -> None:
        """Close this rollup's cursor (the thread's database stays open for the next one)."""
        self._con.close()

    def parse(self, values: list[bytes | None], metadata: Mapping[str, pa.Array] | None = None) -> ParsedBatch:
        """Parse and roll up one batch of record values (``None`` for a null value), in one pass.

        ``metadata`` holds the records' metadata the schema reads (:attr:`RollupSchema.metadata_needs`),
        by need: ``key`` and ``header:<name>`` (binary), ``timestamp`` (int64 ms), ``topic`` (string),
        ``offset`` (int64; the records' positions in ``values`` if not given).
        """
        out = self._classified(values, metadata)
        status = out.column("__status")
        good = pc.equal(status, 0)
        if pc.all(good).as_py() is not False:  # the usual case: every record is good (or none came)
            return ParsedBatch(sketched(out.drop_columns(_AUX_COLUMNS), self.schema, build_sketches), 0, (), 0)
        bad = out.filter(pc.equal(status, 1)).sort_by("__bad_i")  # one row per bad record
        if self._became_multi_value(bad):
            return self.parse(values, metadata)
        rows = sketched(out.filter(good).drop_columns(_AUX_COLUMNS), self.schema, build_sketches)
        thrown = out.filter(pc.equal(status, 2)).column("__n")
        first = bad.slice(0, _SAMPLE_LIMIT)
        samples = tuple(BadRecord(int(i), str(r), _text(values[i])[:300])
                        for i, r in zip(first.column("__bad_i").to_pylist(), first.column("__reason").to_pylist(),
                                        strict=True))
        return ParsedBatch(rows, bad.num_rows, samples, int(pc.sum(thrown).as_py() or 0))

    def parse_each(self, values: list[bytes | None], metadata: Mapping[str, pa.Array] | None = None
                   ) -> list[tuple[dict[str, Any] | None, str | None]]:
        """Each record parsed on its own, in batch order, by a schema without rollup (the sampler's view).

        A kept record gives ``(row, None)``, an unparseable one ``(None, reason)``, one the filter
        throws away ``(None, None)``. The batch is still parsed in one pass.
        """
        if self.schema.rollup:
            raise ValueError("parse_each needs a schema without rollup: with it, records share rows")
        out = self._classified(values, metadata)
        status = out.column("__status").to_pylist()
        if self._became_multi_value(out.filter(pc.equal(out.column("__status"), 1))):
            return self.parse_each(values, metadata)
        bad_at = out.column("__bad_i").to_pylist()
        if len(status) != len(values) or any(s == 1 and i != k for k, (s, i) in enumerate(zip(status, bad_at,
                                                                                                strict=True))):
            raise AssertionError("the parse did not keep the batch's order")  # a row per record, in order
        kept = sketched(out.filter(pc.equal(out.column("__status"), 0)).drop_columns(
            [*_AUX_COLUMNS, SEGMENT_START]), self.schema, build_sketches).to_pylist()
        reasons, rows = out.column("__reason").to_pylist(), iter(kept)
        return [(next(rows), None) if s == 0 else (None, reasons[k] if s == 1 else None)
                for k, s in enumerate(status)]

    def _classified(self, values: list[bytes | None], metadata: Mapping[str, pa.Array] | None) -> pa.Table:
        """The parse query's answer for one batch: its rows, each with the status of its records."""
        read = parse_input(self.schema.decoder, self.schema.delimited is not None, values)
        problems = {} if read.problems is None else {"__problem": read.problems}
        typed = {} if read.typed is None else {"__v": read.typed}
        positions = pa.array(np.arange(len(values), dtype=np.int64))
        offsets = {"offset": positions} if self.schema.has_pairs else {}
        batch = pa.table({"__i": positions, "__raw": read.values, **problems, **typed,
                          **{metadata_column(need): array for need, array in {**offsets, **(metadata or {})}.items()}})
        self._con.register("batch", batch)
        try:
            if self.schema.discover:
                self._discover(read.typed is not None)
            if read.typed is not None:
                return arrow_query(self._con, self._parse_query(read.typed.type))
            return arrow_query(self._con, self._parse_query(None, self._may_hold_arrays(read.values)))
        finally:
            self._con.unregister("batch")

    def _may_hold_arrays(self, values: pa.Array) -> bool:
        """Whether a JSON array may be in the batch: its JSON text has a ``[`` (or it is not JSON text yet)."""
        if self.schema.decoder is not None or self.schema.delimited is not None:
            return True  # decoded or split inside the query: arrays may appear with no '[' in the bytes
        return bool(pc.any(pc.match_substring(values, "[")).as_py())

    def _became_multi_value(self, bad: pa.Table) -> bool:
        """Whether ``bad`` rows hold arrays in string dimensions (Druid's multi-value dimensions).

        If so, the schema stores them as lists from now on, and the batch must be parsed again.
        """
        arrays = {array_reason(d.name): d.name for d in self.schema.dimensions
                  if d.type == "string" and not d.multi_value}
        found = {arrays[r] for r in pc.unique(bad.column("__reason")).to_pylist() if r in arrays}
        if found:
            self._use(self.schema.with_multi_value(found))
        return bool(found)

    def split_by_segment(self, rows: pa.Table) -> list[tuple[datetime, datetime, pa.Table]]:
        """Cut rolled-up rows into (interval start, interval end, rows) per segment interval.

        Rows come out fully sorted (time, dimensions, metrics), so the same input always
        gives byte-identical files; ``__time`` is UTC milliseconds, as Druid keeps it. Rows of one
        interval with plain columns are sorted by Arrow in DuckDB's order (a query costs a small
        task ~4 ms of its ~18).
        """
        columns = ", ".join(_q(c) for c in self.schema.output_columns)
        self._con.register("rows", rows)
        try:
            intervals = self._intervals(rows)
            out = []
            for start, stop in intervals:
                if len(intervals) == 1 and _sortable(rows, self.schema.output_columns):  # a trickle's task, mostly
                    part = rows.select(self.schema.output_columns).sort_by(
                        [(c, "ascending") for c in self.schema.output_columns])  # nulls last, as DuckDB
                else:
                    part = arrow_query(self._con, f"SELECT {columns} FROM rows WHERE {SEGMENT_START} = $start "
                                       "ORDER BY ALL", {"start": start})
                part = part.set_column(0, TIME, part.column(0).cast(pa.timestamp("ms", tz="UTC")))
                out.append((start.replace(tzinfo=UTC), stop.replace(tzinfo=UTC), part))
            return out
        finally:
            self._con.unregister("rows")

    def _intervals(self, rows: pa.Table) -> list[tuple[datetime, datetime]]:
        """The segment intervals of ``rows`` (registered as ``rows``), in order, as naive UTC (start, end).

        Without a query where the end needs none (~3 ms of a small task): every granularity but months.
        """
        granularity = self.schema.segment_granularity
        starts: list[datetime | None] = pc.unique(rows.column(SEGMENT_START)).to_pylist()
        ends = [None if start is None else bucket_end(granularity, start) for start in starts]
        if all(end is not None for end in ends):
            return sorted(zip(starts, ends, strict=True))  # type: ignore[arg-type]
        end = bucket_end_sql(granularity, SEGMENT_START)
        return self._con.execute(f"SELECT DISTINCT {SEGMENT_START}, {end} FROM rows ORDER BY 1").fetchall()

    def sort(self, rows: pa.Table) -> pa.Table:
        """``rows`` sorted by every column in order, as segment files keep them (lists and sketches too)."""
        self._con.register("rows", rows)
        try:
            return arrow_query(self._con, "SELECT * FROM rows ORDER BY ALL")
        finally:
            self._con.unregister("rows")

    def merge(self, partials: list[pa.Table]) -> pa.Table:
        """Combine partial rollups (count and sums add, min/max combine); no-op without rollup."""
        if not partials:
            raise ValueError("nothing to merge")
        partials = [with_every_dimension(p, self.schema) for p in partials]
        if len(partials) == 1 or not self.schema.rollup:
            return pa.concat_tables(partials)
        self._con.register("partials", pa.concat_tables(partials))
        try:
            merged = arrow_query(self._con, aggregate_sql(self.schema, "partials", combine=True))
            return sketched(merged, self.schema, merge_sketches)
        finally:
            self._con.unregister("partials")


def _sortable(rows: pa.Table, columns: list[str]) -> bool:
    """Whether Arrow sorts ``columns`` as DuckDB's ``ORDER BY ALL`` does: no lists, structs or binary values."""
    return all(not (pa.types.is_nested(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))
               for t in (rows.schema.field(c).type for c in columns))
