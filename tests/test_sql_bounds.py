"""Value sizes in SQL queries: only allow-listed functions, and no value past the query's size limit.

Each attack once ran the JVM out of heap, never returned, or built 10-100 M characters from a
read-only SQL user's query; each is now a clean 400 and the session answers the next query.
"""

from __future__ import annotations

import time

import pytest

from overlord.query.engine import execute_sql
from overlord.query.errors import QueryError
from overlord.query.function_bounds import ALLOWED_FUNCTIONS, MAX_VALUE_SIZE


def _alive(spark, engine) -> None:
    assert execute_sql(spark, engine, "SELECT 1 AS one").table.to_pylist() == [{"one": 1}]


@pytest.mark.parametrize("sql", [
    "SELECT max(length(format_string(concat('%0', CAST(900000000 + id AS STRING), 'd'), id))) FROM range(2)",
    "SELECT length(format_string('%0900000000d', 1))",
    "SELECT length(printf('%.900000000f', 1.0))",
    "SELECT length(replace(repeat('x', 10000), 'x', repeat('y', 10000)))",
    "SELECT length(regexp_replace(repeat('x', 10000), 'x', repeat('y', 10000)))",
    "SELECT length(string_agg(repeat('x', 10000), ',')) FROM range(1000)",
    "SELECT length(listagg(repeat('x', 10000))) FROM range(1000)",
    "SELECT length(concat_ws(',', collect_list(repeat('x', 10000)))) FROM range(1000)",
    "SELECT size(array_agg(id)) FROM range(10)",
    "SELECT length(aggregate(sequence(1, 1000), '', (acc, x) -> concat(acc, repeat('x', 10000))))",
    "SELECT aes_decrypt(unbase64('x'), 'k')",
    "SELECT raise_error('boom')",
    "WITH a AS (SELECT repeat('x', 10000) AS y), b AS (SELECT concat(y, y) AS y FROM a), "
    "c AS (SELECT concat(y, y) AS y FROM b), d AS (SELECT concat(y, y) AS y FROM c), "
    "e AS (SELECT concat(y, y) AS y FROM d), f AS (SELECT concat(y, y) AS y FROM e), "
    "g AS (SELECT concat(y, y) AS y FROM f), h AS (SELECT concat(y, y) AS y FROM g), "
    "i AS (SELECT concat(y, y) AS y FROM h), j AS (SELECT concat(y, y) AS y FROM i), "
    "k AS (SELECT concat(y, y, y, y, y, y, y, y) AS y FROM j) SELECT length(y) FROM k",
    "SELECT length(y) FROM (SELECT concat(y, y, y, y) AS y FROM (SELECT concat(y, y, y, y) AS y FROM "
    "(SELECT concat(y, y, y, y) AS y FROM "
    "(SELECT concat(y, y, y, y) AS y FROM (SELECT concat(y, y, y, y) AS y FROM (SELECT concat(y, y, y, y) AS y FROM "
    "(SELECT repeat('x', 10000) AS y)))))))",
    "SELECT size(transform(sequence(1, 10000), x -> repeat('x', 10000)))",
])
def test_each_attack_is_a_clean_400_and_the_session_lives(spark, engine, sql):
    with pytest.raises(QueryError) as caught:
        execute_sql(spark, engine, sql)
    assert caught.value.error_class in ("VALUE_TOO_LARGE", "FUNCTION_NOT_ALLOWED"), caught.value.message
    assert caught.value.to_druid()["errorCode"] == "invalidInput" and "Traceback" not in caught.value.message
    _alive(spark, engine)


@pytest.mark.parametrize("sql", [
    "SELECT length(format_string('%05d|%s', 7, 'x')) AS n",
    "SELECT length(replace('abc', 'b', 'xyz')) AS n",
    "SELECT length(concat(repeat('x', 10000), repeat('y', 10000))) AS n",
    "WITH a AS (SELECT repeat('x', 100) AS y), b AS (SELECT concat(y, y) AS y FROM a) SELECT length(y) AS n FROM b",
    "SELECT size(transform(sequence(1, 100), x -> x * 2)) AS n",
])
def test_small_values_still_build(spark, engine, sql):
    assert execute_sql(spark, engine, sql).table.column("n")[0].as_py() > 0


_HOSTILE = "WITH a AS (SELECT repeat('x', 10000) AS s, array(repeat('x', 10000)) AS arr, 900000000 AS n), " \
    "b AS (SELECT {call} AS s, arr, n FROM a), c AS (SELECT {call} AS s, arr, n FROM b) " \
    "SELECT length(CAST(s AS STRING)) AS n FROM c"
_ARGUMENTS = ["s", "s, s", "s, n", "s, s, s", "s, n, s", "arr, s", "n, n, n"]
_LAMBDA_ARGUMENTS = ["arr, x -> concat(x, x, s)", "arr, (x, y) -> concat(x, x, s)",
                     "arr, arr, (x, y) -> concat(x, y, s)"]


def _call(name: str, arguments: str) -> str:
    return f"`{name}`({arguments})" if name.isidentifier() else f"(s {name} s)"


def test_every_allowed_function_with_hostile_arguments_is_a_400_or_small(spark, engine):
    """Each allowed function, applied to itself through CTE levels on a 10,000-character string and a huge integer."""
    started, refused, ran = time.monotonic(), 0, 0
    for name, kind in sorted(ALLOWED_FUNCTIONS.items()):
        variants = _LAMBDA_ARGUMENTS if kind == "lambda" else ["s"] if not name.isidentifier() else _ARGUMENTS
        for arguments in variants:
            call = _call(name, arguments)
            try:
                table = execute_sql(spark, engine, _HOSTILE.format(call=call)).table
            except QueryError as exc:
                assert "Traceback" not in exc.message and exc.to_druid()["errorCode"] == "invalidInput"
                refused += 1
                continue
            ran += 1
            sizes = [n for n in table.column("n").to_pylist() if n is not None]
            assert all(n <= MAX_VALUE_SIZE for n in sizes), (call, sizes)
    assert ran and refused
    _alive(spark, engine)
    assert time.monotonic() - started < 300
