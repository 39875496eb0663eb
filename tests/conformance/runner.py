"""Druid's own test queries against a live overlord: ingest Druid's test tables, run each case, grade it.

A case (``cases/<area>.json``) is one of Druid's SQL or native test queries with Druid's expected rows.
Each ends as one of:

- PASS: the answer equals Druid's (values, NULL versus empty string, row order where the query fixes it,
  column names and SQL types where the case states them);
- WRONG: an answer that differs, the worst outcome: a user gets a different number without being told;
- REFUSED: a 400 of our own saying what is not supported (:data:`REFUSALS`);
- ERROR: anything else: an engine's error leaking through, a 5xx, a broken answer.

A case Druid itself refuses (``"expect": "error"``) passes on any 400 and is WRONG on an answer.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from overlord.dev.sample_data import create_topic, produce
from tests.conformance.datasets import DATASETS

__all__ = ["CASES_DIR", "REFUSALS", "STATUSES", "Case", "Outcome", "grade", "ingest", "load_cases", "run", "table"]

CASES_DIR = Path(__file__).parent / "cases"
STATUSES = ("PASS", "WRONG", "REFUSED", "ERROR")
REFUSALS = frozenset({"UNSUPPORTED_DRUID_SQL", "INVALID_NATIVE_QUERY", "FUNCTION_NOT_ALLOWED"})
"""Error classes our own checks raise, each naming what is not supported; any other 400 is the engine's."""
_REL_TOLERANCE = 1e-6  # FLOAT columns: Druid's float arithmetic and ours round differently past float32


@dataclass(frozen=True)
class Case:
    """One of Druid's test queries and its expected answer."""

    area: str
    id: str
    source: str
    query: str | dict[str, Any]
    rows: list[Any] = field(default_factory=list)
    ordered: bool = False
    columns: list[str] | None = None
    types: list[str] | None = None
    expect_error: bool = False

    @property
    def name(self) -> str:
        return f"{self.area}/{self.id}"

    @property
    def native(self) -> bool:
        return isinstance(self.query, dict)


@dataclass(frozen=True)
class Outcome:
    """How a case ended, and why (the difference, or the error)."""

    case: Case
    status: str
    detail: str = ""


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    """Every case of every ``<area>.json`` in ``directory``, in file order."""
    cases = []
    for path in sorted(directory.glob("*.json")):
        for raw in json.loads(path.read_text(encoding="utf-8")):
            cases.append(Case(area=path.stem, id=raw["id"], source=raw["from"],
                              query=raw["native"] if "native" in raw else raw["sql"], rows=raw.get("rows", []),
                              ordered=raw.get("ordered", False), columns=raw.get("columns"),
                              types=raw.get("types"), expect_error=raw.get("expect") == "error"))
    duplicates = [name for name, n in Counter(c.name for c in cases).items() if n > 1]
    if duplicates:
        raise ValueError(f"case ids must be unique within an area: {duplicates}")
    return cases


def ingest(base_url: str, bootstrap_servers: str, timeout_s: float = 300) -> None:
    """Produce each dataset's rows to a new topic, submit its supervisor, and wait until every row is queryable."""
    suffix = f"{time.time_ns():x}"
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for dataset in DATASETS:
            topic = f"druid-{dataset.name}-{suffix}"
            create_topic(bootstrap_servers, topic, 1)
            produce(bootstrap_servers, topic, [json.dumps(row).encode() for row in dataset.rows], 1)
            client.post("/druid/indexer/v1/supervisor", json=dataset.spec(topic)).raise_for_status()
        deadline = time.monotonic() + timeout_s
        for dataset in DATASETS:
            while _rows(client, dataset.name) != len(dataset.rows):
                if time.monotonic() > deadline:
                    status = client.get(f"/druid/indexer/v1/supervisor/{dataset.name}/status").text
                    raise TimeoutError(f"{dataset.name}: its {len(dataset.rows)} rows were not published in "
                                       f"{timeout_s:.0f} s; supervisor status: {status[:3000]}")
                time.sleep(0.5)


def _rows(client: httpx.Client, datasource: str) -> int | None:
    answer = client.post("/druid/v2/sql", json={"query": f'SELECT COUNT(*) FROM druid."{datasource}"',
                                                "resultFormat": "array"})
    return answer.json()[0][0] if answer.status_code == 200 else None


def run(client: httpx.Client, case: Case) -> Outcome:
    """Send ``case`` to the overlord behind ``client`` and grade the answer."""
    if case.native:
        answer = client.post("/druid/v2", json=case.query)
    else:
        answer = client.post("/druid/v2/sql", json={
            "query": case.query, "resultFormat": "array", "header": True, "sqlTypesHeader": True})
    try:
        body = answer.json()
    except ValueError:
        return Outcome(case, "ERROR", f"HTTP {answer.status_code}, not JSON: {answer.text[:300]}")
    if answer.status_code != 200:
        return _refusal(case, answer.status_code, body)
    if case.expect_error:
        return Outcome(case, "WRONG", "Druid refuses this query; we answered it")
    if case.native:
        return grade(case, None, None, _events(body) if case.query.get("queryType") == "scan" else body)
    if not isinstance(body, list) or len(body) < 2:
        return Outcome(case, "ERROR", f"no header rows in {str(body)[:300]}")
    return grade(case, body[0], body[1], body[2:])


def _events(batches: Any) -> Any:
    """A scan's rows: its batches' events run together (how rows fall into batches is the segments' business)."""
    if isinstance(batches, list) and all(isinstance(b, dict) and "events" in b for b in batches):
        return [event for batch in batches for event in batch["events"]]
    return batches


def _refusal(case: Case, status: int, body: Any) -> Outcome:
    error = body if isinstance(body, dict) else {}
    error_class = (error.get("context") or {}).get("errorClass")
    message = f"HTTP {status} {error_class or ''}: {error.get('errorMessage', str(body)[:300])}"
    if status == 400 and case.expect_error:
        return Outcome(case, "PASS", message)
    if status == 400 and error_class in REFUSALS:
        return Outcome(case, "REFUSED", message)
    return Outcome(case, "ERROR", message)


def grade(case: Case, names: list[str] | None, sql_types: list[str] | None, rows: Any) -> Outcome:
    """Compare an answer with the case's: names and SQL types where stated, then the rows."""
    if case.columns is not None and names != case.columns:
        return Outcome(case, "WRONG", f"columns {names}, Druid's {case.columns}")
    if case.types is not None and sql_types != case.types:
        return Outcome(case, "WRONG", f"types {sql_types}, Druid's {case.types}")
    got, want = _normal(rows if case.native else _arrays(rows, case.rows)), _normal(case.rows)
    if not case.ordered and isinstance(got, list) and isinstance(want, list):
        got, want = sorted(got, key=_order), sorted(want, key=_order)
    if _same(got, want):
        return Outcome(case, "PASS")
    return Outcome(case, "WRONG", f"rows {json.dumps(rows)[:600]}, Druid's {json.dumps(case.rows)[:600]}")


def _arrays(rows: Any, expected: Any) -> Any:
    """SQL rows with each array Druid's HTTP answer writes as JSON text (``sqlStringifyArrays``) read back as an
    array where Druid's test holds an array.
    """
    if not (isinstance(rows, list) and isinstance(expected, list) and len(rows) == len(expected)):
        return rows
    return [[json.loads(value) if isinstance(value, str) and value.startswith("[") and any(
        isinstance(row[i], list) for row in expected if isinstance(row, list) and i < len(row)) else value
        for i, value in enumerate(got)] if isinstance(got, list) else got for got in rows]


def _normal(value: Any) -> Any:
    """``value`` with whole floats as ints (Druid's 2.0 and our 2 are one value; types are checked apart)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _order(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(got, bool) or isinstance(want, bool) or not isinstance(got, int | float) \
                or not isinstance(want, int | float):
            return False
        return math.isclose(got, want, rel_tol=_REL_TOLERANCE, abs_tol=1e-9)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def table(outcomes: Iterable[Outcome]) -> list[tuple[str, Counter[str]]]:
    """Counts of each status per area, then the total (area ``"all"``)."""
    areas: dict[str, Counter[str]] = {}
    for outcome in outcomes:
        areas.setdefault(outcome.case.area, Counter())[outcome.status] += 1
    total: Counter[str] = sum(areas.values(), Counter())
    return [*sorted(areas.items()), ("all", total)]


def markdown(rows: Sequence[tuple[str, Counter[str]]]) -> str:
    """The per-area table as Markdown, with PASS and PASS + REFUSED as shares of the cases."""
    lines = ["| area | cases | PASS | WRONG | REFUSED | ERROR | PASS % | PASS + REFUSED % |",
             "|---|---|---|---|---|---|---|---|"]
    for area, counts in rows:
        n = sum(counts.values())
        lines.append(f"| {area} | {n} | " + " | ".join(str(counts[s]) for s in STATUSES)
                     + f" | {100 * counts['PASS'] / n:.0f} | {100 * (counts['PASS'] + counts['REFUSED']) / n:.0f} |")
    return "\n".join(lines)
