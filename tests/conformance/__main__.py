"""``python -m tests.conformance``: ingest Druid's test tables on the embedded stack, run every case, print the table.

``--area A`` runs one area, ``--show STATUS`` prints the cases that ended so (with why), ``--json FILE`` saves
every outcome.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx
import sqlalchemy as sa

from tests.conformance.runner import STATUSES, Outcome, ingest, load_cases, markdown, run, table


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance", description=__doc__)
    parser.add_argument("--area", action="append", help="run only this area (repeatable)")
    parser.add_argument("--case", action="append", help="run only cases whose area/id contains this (repeatable)")
    parser.add_argument("--show", action="append", choices=STATUSES, default=[], help="print the cases so graded")
    parser.add_argument("--json", type=Path, help="save every outcome to this file")
    args = parser.parse_args()
    cases = [c for c in load_cases() if (not args.area or c.area in args.area)
             and (not args.case or any(part in c.name for part in args.case))]
    outcomes = _run_on_embedded_stack(cases)
    for outcome in outcomes:
        if outcome.status in args.show:
            print(f"{outcome.status:8} {outcome.case.name}  [{outcome.case.source}]\n    {outcome.detail}")
    print(markdown(table(outcomes)))
    if args.json:
        args.json.write_text(json.dumps([{"case": o.case.name, "status": o.status, "detail": o.detail}
                                         for o in outcomes], indent=1))
    return 0


def _run_on_embedded_stack(cases: list) -> list[Outcome]:
    from indexing_task.spark import get_spark
    from overlord.dev.stack import dev_stack
    from overlord.http.app import create_app
    from segment_store import upgrade_schema
    from tests.helpers import served, start_overlord

    with tempfile.TemporaryDirectory(prefix="overlord-conformance-") as workdir, dev_stack(Path(workdir)) as stack:
        admin = sa.create_engine(stack.database_url)
        upgrade_schema(admin)
        spark = get_spark("local[2]", resident_slots=2)
        overlord = start_overlord(stack, admin, spark, str(Path(workdir) / "deep"))
        try:
            with served(create_app(overlord, authenticator=None)) as url:
                print(f"ingesting Druid's test tables ({len(cases)} cases to run)", file=sys.stderr)
                ingest(url, stack.bootstrap_servers)
                with httpx.Client(base_url=url, timeout=120) as client:
                    return [run(client, case) for case in cases]
        finally:
            overlord.stop(grace_s=10)
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
