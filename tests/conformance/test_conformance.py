"""Druid's own test queries, each a test: ingested through supervisors, asked over HTTP, graded against Druid's answer.

A case must PASS or be REFUSED (a 400 of ours naming what is unsupported). Cases known to end otherwise are
listed in ``known.json`` with their status: they are reported as expected failures, and a listed case that
starts to pass, or fails differently, fails the test so the list stays true. ``UNORDERED`` marks a case whose
answer depends on an order Druid fixes and the query does not (``LIMIT`` without ``ORDER BY``: Druid reads in
time order, Spark in an order of its own): it may PASS or be WRONG, never anything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from overlord.http.app import create_app
from tests.conformance.runner import Case, Outcome, ingest, load_cases, run
from tests.helpers import served, start_overlord

CASES = load_cases()
KNOWN: dict[str, str] = json.loads((Path(__file__).parent / "known.json").read_text(encoding="utf-8"))
AT_ONCE = 4
"""Cases asked at once (the engine runs up to ``OVERLORD_QUERY_MAX_CONCURRENT``, 8, queries at a time)."""


@pytest.fixture(scope="module")
def druid_tables(stack, engine, spark, tmp_path_factory) -> Iterator[httpx.Client]:
    """A client of an overlord that holds Druid's test tables, ingested by its supervisors."""
    overlord = start_overlord(stack, engine, spark, str(tmp_path_factory.mktemp("deep")))
    try:
        with served(create_app(overlord, authenticator=None)) as url:
            ingest(url, stack.bootstrap_servers)
            with httpx.Client(base_url=url, timeout=120) as client:
                yield client
    finally:
        overlord.stop(grace_s=10)
        overlord.engine.dispose()


@pytest.fixture(scope="module")
def outcomes(druid_tables: httpx.Client, request: pytest.FixtureRequest) -> dict[str, Outcome]:
    """The outcome of every case selected in this run, asked :data:`AT_ONCE` at a time (one at a time, the
    module waited on each round trip: 443 s for 685 cases in one profile).
    """
    selected = [item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        return dict(zip((case.name for case in selected), pool.map(lambda case: run(druid_tables, case), selected),
                        strict=True))


def test_every_case_id_listed_as_known_exists():
    assert set(KNOWN) <= {case.name for case in CASES}
    assert set(KNOWN.values()) <= {"WRONG", "ERROR", "UNORDERED"}


@pytest.mark.long  # 685 round trips, most through Spark: about 4 minutes, the default run's largest module
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_druid_answers(outcomes: dict[str, Outcome], case: Case) -> None:
    outcome = outcomes[case.name]
    known = KNOWN.get(case.name)
    if known is None:
        assert outcome.status in ("PASS", "REFUSED"), f"{outcome.status}: {outcome.detail}"
    elif known == "UNORDERED":
        assert outcome.status in ("PASS", "WRONG"), f"{outcome.status}: {outcome.detail}"
        if outcome.status == "WRONG":
            pytest.xfail(f"rows in another order than Druid's scan: {outcome.detail}")
    elif outcome.status == known:
        pytest.xfail(f"known {known}: {outcome.detail}")
    else:
        pytest.fail(f"listed in known.json as {known}, now {outcome.status} ({outcome.detail}): update the list")
