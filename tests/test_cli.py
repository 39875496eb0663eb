"""The ``overlord`` command line, run as a user would run it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from overlord.dev.sample_data import make_sample_events, produce
from specs import load_example
from tests.helpers import overlord_cli


def test_index_once_prints_what_it_published(stack, engine, make_topic, datasource, tmp_path: Path):
    topic = make_topic(2)
    sample = make_sample_events(3_000, bad_every=1_000)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    spec = load_example("events").to_druid_json()
    spec["spec"]["dataSchema"]["dataSource"] = datasource
    spec["spec"]["ioConfig"]["topic"] = topic
    spec["spec"]["tuningConfig"]["intermediatePersistPeriod"] = "PT10M"
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {**stack.as_env(), "OVERLORD_DEEP_STORAGE": str(tmp_path / "deep"), "OVERLORD_SPARK_MASTER": "local[1]"}

    result = overlord_cli("index", str(spec_file), env=env)

    assert result.returncode == 0, result.stderr
    assert "publish OK" in result.stdout
    assert f"records read   {len(sample.records):>12,}" in result.stdout
    assert "unparseable               3" in result.stdout
    assert "spec.tuningConfig.intermediatePersistPeriod is accepted but not used" in result.stderr

    listing = overlord_cli("segments", datasource, env=env)
    assert listing.returncode == 0 and "committed offsets:" in listing.stdout
    assert listing.stdout.count(".parquet") >= 2
    as_json = json.loads(overlord_cli("segments", datasource, "--json", env=env).stdout)
    assert sum(as_json["committedOffsets"].values()) == len(sample.records)
    assert len(as_json["segments"]) == listing.stdout.count(".parquet") and as_json["segments"][0]["used"] is True


def test_invalid_spec_names_the_field(stack, tmp_path: Path):
    spec = load_example("events").to_druid_json()
    spec["spec"]["ioConfig"]["taskCount"] = -2
    spec_file = tmp_path / "bad.json"
    spec_file.write_text(json.dumps(spec))

    result = overlord_cli("index", str(spec_file), env=stack.as_env())

    assert result.returncode == 2
    assert "spec.ioConfig.taskCount" in result.stderr and "Traceback" not in result.stderr


RUNS_A_SERVICE = {"dev up", "demo", "quickstart", "serve"}
"""Commands that run until stopped or print a walk-through, not data a script reads."""


def _commands(parser: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf command of the ``overlord`` parser, by its words."""
    import argparse

    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield name.strip(), parser
    for action in subcommands:
        for word, sub in action.choices.items():
            yield from _commands(sub, f"{name} {word}")


@pytest.mark.unit
def test_every_command_explains_each_argument_and_prints_data_as_json_when_asked():
    from overlord.cli.main import _parser

    commands = dict(_commands(_parser()))
    assert len(commands) > 30
    for name, parser in commands.items():
        for action in parser._actions:
            assert action.help, f"overlord {name}: {'/'.join(action.option_strings) or action.dest} has no help"
        if name not in RUNS_A_SERVICE | {"auth hash-password"}:  # that one prints the hash alone, to paste
            assert any(a.dest == "json" for a in parser._actions), f"overlord {name} has no --json"
