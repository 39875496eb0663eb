"""Hostile input, generated: schemathesis over every operation of the OpenAPI description (with and
without credentials: never a 5xx, never a hang), hypothesis over specs (never anything but a
SpecError, and every refusal names a path) and over records (each ends processed, unparseable or
thrown away). Bounded case counts keep this in the suite; ``FUZZ_EXAMPLES`` raises them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexing_task.rollup import Rollup
from specs import SpecError, load_supervisor_spec
from tests.helpers import WRITER, example_json
from tests.test_hostile_records import schema

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def test_no_operation_answers_a_server_error_with_or_without_credentials(secured):
    url, _app = secured
    description = httpx.get(url + "/openapi.json", auth=WRITER, timeout=30).json()
    api = schemathesis.openapi.from_dict(description)
    credentials = httpx.BasicAuth(*WRITER)._auth_header
    cases: list[tuple[str, int]] = []
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) > 20

    for operation in operations:
        @FUZZ
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            name = case.operation.label
            for headers in ({}, {"Authorization": credentials}):
                response = case.call(base_url=url, headers=headers, timeout=60)
                cases.append((name, response.status_code))
                assert response.status_code < 500, (name, response.status_code, response.text[:500])

        call()
    print(f"schemathesis: {len(cases)} requests over {len(operations)} operations, "
          f"{sum(1 for _, s in cases if s < 400)} accepted")
    assert {status for _, status in cases} >= {401}


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=3), max_leaves=8)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@FUZZ
@given(data=st.data())
def test_a_mutated_spec_is_accepted_or_refused_naming_paths(data: Any) -> None:
    spec = example_json("events")
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(spec)[1:]
        if not paths:  # every field removed already (hypothesis drew "pop spec", then "pop type")
            break
        path = data.draw(st.sampled_from(paths))
        parent = spec
        for part in path[:-1]:
            parent = parent[part]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1])
        else:
            parent[path[-1]] = data.draw(_JSON)
    try:
        load_supervisor_spec(spec)
    except SpecError as refused:
        assert refused.errors and all(path for path, _ in refused.errors), refused.errors


_FIELD = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=30)
_RECORD = st.one_of(
    st.binary(max_size=60),
    st.fixed_dictionaries({}, optional={"t": _FIELD | st.sampled_from(["2026-01-01T10:00:00Z", "epoch", 1e15]),
                                        "k": _FIELD, "v": _FIELD}).map(lambda r: json.dumps(r).encode()),
    st.none())


@FUZZ
@given(records=st.lists(_RECORD, max_size=40))
def test_every_record_ends_processed_unparseable_or_thrown_away(records: list[bytes | None]) -> None:
    rollup = Rollup(schema())
    try:
        parsed = rollup.parse(records)
    finally:
        rollup.close()
    processed = sum(parsed.rows.column("cnt").to_pylist()) if parsed.rows.num_rows else 0
    assert processed + parsed.bad_count + parsed.thrown_away == len(records)
