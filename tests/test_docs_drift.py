"""The docs name only what exists: settings, commands, metrics and files the code and the repository have.

Every ``OVERLORD_*`` variable the README, ``docs/`` and ``docker/`` mention is one the code reads (and every
one the code reads is documented); every ``overlord ...`` command they quote is one the command line has;
every metric they name is one ``/metrics`` exports; every repository path they quote or link exists.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from overlord.cli.main import _parser
from overlord.config import ENV_PREFIX, Settings
from tests.test_monitoring import exported_names

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DEPLOYMENT = sorted(p for p in (ROOT / "docker").rglob("*") if p.is_file() and p.suffix != ".lock")
PACKAGES = ("specs", "segment_store", "indexing_task", "overlord")
SECRET_VARIABLES = "OVERLORD_SECRET_"
"""The ``environment`` provider's variables: named by the operator (docs/security.md gives examples)."""
LOG_LINES = {("stopped", "")}
"""``overlord ...`` texts the docs quote that are log lines, not commands."""
GENERATED = "docker/secrets/"
"""Files docker/make-secrets.sh writes on the operator's machine (never committed)."""
SERVICE_LINKS = {"OVERLORD_PORT"}
"""What Kubernetes' service links would inject for the Service ``overlord`` (a manifest's comment says why off)."""


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _mentions(pattern: str, paths: list[Path]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in paths:
        for name in re.findall(pattern, _text(path), re.MULTILINE):
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def _read_by_code() -> set[str]:
    names = {ENV_PREFIX + field.upper() for field in Settings.model_fields}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r"OVERLORD_[A-Z0-9_]+", _text(path)))
    return names


def test_every_documented_variable_is_read_by_the_code_and_every_one_it_reads_is_documented():
    documented = _mentions(r"OVERLORD_[A-Z0-9_]+", DOCS + DEPLOYMENT)
    read = _read_by_code() | set(_mentions(r"\$\{(OVERLORD_[A-Z0-9_]+)", DEPLOYMENT))  # compose's own variables
    unknown = {name: where for name, where in documented.items()
               if name not in read | SERVICE_LINKS and not name.startswith(SECRET_VARIABLES)}
    assert not unknown, f"documented but read by no code: {unknown}"
    undocumented = sorted(name for name in read - documented.keys() if name != SECRET_VARIABLES)
    assert not undocumented, f"read by the code but in no doc: {undocumented}"


def _commands() -> dict[str, set[str] | None]:
    """The command line's subcommands, each with its own subcommands (None: it has none)."""
    def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        return dict(actions[0].choices) if actions else {}
    return {name: set(choices(sub)) or None for name, sub in choices(_parser()).items()}


def test_every_quoted_overlord_command_is_one_the_command_line_has():
    commands = _commands()
    quoted: dict[tuple[str, str], set[str]] = {}
    for path in DOCS:  # inline code, and the lines of fenced code blocks
        text = _text(path)
        code = re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL) + re.findall(r"`([^`\n]+)`", text)
        for snippet in code:
            command_line = r"^\s*(?:\$\s*)?overlord ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?"
            for found in re.findall(command_line, snippet, re.MULTILINE):
                quoted.setdefault(found, set()).add(str(path.relative_to(ROOT)))
    assert len(quoted) > 20
    for (command, verb), where in quoted.items():
        if (command, verb) in LOG_LINES:
            continue
        assert command in commands, f"`overlord {command}` (in {sorted(where)}) is no command"
        verbs = commands[command]
        if verbs is not None and verb:
            assert verb in verbs, f"`overlord {command} {verb}` (in {sorted(where)}) is no command"


def test_every_documented_metric_is_exported():
    exported = exported_names()
    families = exported | {re.sub(r"_(bucket|sum|count|total|created)$", "", name) for name in exported}
    named = _mentions(r"\b((?:overlord|process)_[a-z0-9_]+)\b(?!\.py)", DOCS + [p for p in DEPLOYMENT
                                                                              if p.suffix == ".md"])
    unknown = {name: where for name, where in named.items() if name not in families}
    assert not unknown, f"named in the docs but not exported: {unknown}"


def test_every_quoted_or_linked_repository_path_exists():
    roots = "|".join(("docs", "docker", "tests", "benchmarks", "specs", "segment_store", "indexing_task", "overlord",
                      "\\.ci"))
    missing = []
    for path in DOCS + [p for p in DEPLOYMENT if p.suffix == ".md"]:
        text = _text(path)
        for quoted in re.findall(rf"`((?:{roots})/[A-Za-z0-9_./-]*[A-Za-z0-9_])(?:[#:][^`]*)?`", text):
            if "*" not in quoted and not quoted.startswith(GENERATED) and not (ROOT / quoted).exists():
                missing.append(f"{path.relative_to(ROOT)}: `{quoted}`")
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in link and not link.startswith("mailto:") and not (path.parent / link).exists():
                missing.append(f"{path.relative_to(ROOT)}: ({link})")
    assert not missing, "paths that do not exist: " + "; ".join(missing)
