"""This thread's in-memory DuckDB database, and queries on it answered as Arrow tables."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa

from indexing_task.transforms import create_macros

__all__ = ["arrow_query", "thread_database"]

_MACROS = {
    "java_double": ("x", "CASE WHEN x = 0 OR (abs(x) >= 0.001 AND abs(x) < 10000000) THEN x::VARCHAR "
                         "ELSE (CASE WHEN x < 0 THEN '-' ELSE '' END) || java_sci(split_part(abs(x)::VARCHAR, 'e', 1), "
                         "coalesce(try_cast(split_part(abs(x)::VARCHAR, 'e', 2) AS INTEGER), 0)) END"),
    "java_sci": ("m, e", "java_sci_digits(rtrim(ltrim(replace(m, '.', ''), '0'), '0'), "
                         "length(split_part(m, '.', 1)) - 1 + e "
                         "- (length(replace(m, '.', '')) - length(ltrim(replace(m, '.', ''), '0'))))"),
    "java_sci_digits": ("d, e", "left(d, 1) || '.' || CASE WHEN length(d) > 1 THEN substr(d, 2) ELSE '0' END "
                                "|| 'E' || e"),
}
"""``java_double(x)``: a double as Java's ``Double.toString`` (and so Spark's cast) writes it: DuckDB's
shortest digits, in ``E`` notation outside [1e-3, 1e7) (``1.0E20``, ``1.23456789E8``, ``1.0E-4``)."""

_local = threading.local()


def arrow_query(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
    """``sql``'s rows as an Arrow table, binding and planning it once.

    ``con.sql(...).to_arrow_table()`` binds a statement twice (the relation's schema, then the run):
    ~10 ms more on every parse of a trickle's small batch, a fifth of a small task's CPU.
    """
    con.execute(sql, dict(params) if params else None)
    reader = None
    try:
        reader = con.to_arrow_reader()
        assert reader is not None, "a result just run is not used up"  # None is for one a fetch has emptied
        return reader.read_all()
    except BaseException:
        if reader is not None:
            reader.close()  # a reader holds the connection until it is read out or closed
        con.abort()  # else the connection refuses its next register or unregister (an unfinished result)
        raise


warnings.filterwarnings("ignore", "Arrow output on a DB-API result", UserWarning, r"indexing_task\.arrow_queries")
""":func:`arrow_query`'s copy is of a rollup's rows (a batch's fraction): cheaper than the second bind it saves."""

def thread_database() -> duckdb.DuckDBPyConnection:
    """Return this thread's in-memory DuckDB database, opened once: opening one costs ~40 ms, a cursor ~0."""
    database = getattr(_local, "database", None)
    if database is None:
        database = _local.database = duckdb.connect(config={"threads": 1, "memory_limit": "1GB"})
        create_macros(database)
        for name, (params, body) in reversed(_MACROS.items()):  # each after the ones it calls
            database.execute(f"CREATE OR REPLACE MACRO {name}({params}) AS {body}")
    return database
