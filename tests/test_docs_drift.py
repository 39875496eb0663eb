"""The docs cannot drift from the code: every ``OVERLORD_*`` variable, ``overlord ...`` command line,
``overlord_*`` metric and repository path that README.md, ``docs/``, ``docker/`` and
``benchmarks/README.md`` mention is one the code has, and every variable the code reads is documented.

Everything allowed is read from the code itself (the settings, the packages' sources, the real argparse
parser, the metric declarations of ``overlord/metrics.py``), never from a hand-kept list. Plain text
and ``ast`` only: ``overlord.metrics`` is parsed, not imported (importing it loads Spark's side).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from overlord.cli.main import _parser as overlord_parser
from overlord.config import ENV_PREFIX, Settings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("specs", "segment_store", "indexing_task", "overlord")
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
            ROOT / "docker" / "kubernetes" / "README.md"]
DOCKER = sorted(p for p in (ROOT / "docker").rglob("*") if p.is_file() and p.suffix in {
    ".yaml", ".yml", ".json", ".sh", ".md", ""} and p.name != "requirements.lock")
DOCS = [*MARKDOWN, *(p for p in DOCKER if p.suffix != ".md")]

_CODE_SPAN = re.compile(r"`([^`]+)`")
_VARIABLE = re.compile(r"\bOVERLORD_[A-Z0-9_]*")
# Kubernetes' service-link variables of a Service named `overlord` (OVERLORD_PORT=tcp://...): named in
# docker/kubernetes/overlord.yaml to say why enableServiceLinks is off; no setting of ours.
_SERVICE_LINK = re.compile(r"^OVERLORD_(PORT|SERVICE_HOST|SERVICE_PORT)(_.*)?$")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def lines(path: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)


def prose_and_blocks(path: Path) -> tuple[str, list[tuple[int, str]]]:
    """A Markdown page's text outside code blocks (the blocks' lines blanked, so offsets keep their line
    numbers) and its code blocks' numbered lines.
    """
    prose, block_lines, block = [], [], False
    for number, line in lines(path):
        if line.lstrip().startswith("```"):
            block = not block
            line = ""
        elif block:
            block_lines.append((number, line))
            line = ""
        prose.append(line)
    return "\n".join(prose), block_lines


def code_spans(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each inline code span of a Markdown page; a span may wrap onto the next line."""
    text, _ = prose_and_blocks(path)
    for found in _CODE_SPAN.finditer(text):
        yield text.count("\n", 0, found.start()) + 1, " ".join(found.group(1).split())


@cache
def package_sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def settings_variables() -> set[str]:
    return {ENV_PREFIX + name.upper() for name in Settings.model_fields}


def code_variables() -> set[str]:
    """The ``OVERLORD_*`` names the packages hold as whole string literals (``os.environ.get("OVERLORD_URL")``,
    ``ALLOWED_BOOTSTRAP_VARIABLE = "OVERLORD_ALLOWED_BOOTSTRAP"``, ...); one ending in ``_`` is a prefix the
    code reads variables by (``OVERLORD_SECRET_``).
    """
    literal = re.compile(r"""["'](OVERLORD_[A-Z0-9_]+)["']""")
    return {name for text in package_sources().values() for name in literal.findall(text)}


def compose_variables() -> set[str]:
    """The ``OVERLORD_*`` names docker/'s files substitute themselves (``${OVERLORD_IMAGE:-...}``)."""
    return {name for path in DOCKER for name in re.findall(r"\$\{(OVERLORD_[A-Z0-9_]+)", path.read_text())}


def test_every_variable_the_docs_name_is_one_the_code_reads():
    known = settings_variables() | code_variables() | compose_variables()
    prefixes = tuple(name for name in known if name.endswith("_"))
    unknown = []
    for path in DOCS:
        for number, line in lines(path):
            for name in _VARIABLE.findall(line):
                if name.endswith("_"):  # `OVERLORD_*`, `OVERLORD_QUERY_*`, `OVERLORD_...`: a family of names
                    ok = any(k.startswith(name) for k in known)
                else:
                    ok = name in known or name.startswith(prefixes) or bool(_SERVICE_LINK.match(name))
                if not ok:
                    unknown.append(f"{rel(path)}:{number}: {name}")
    assert not unknown, "no such setting or variable in the code:\n" + "\n".join(unknown)


def test_every_variable_the_code_reads_is_documented():
    configuration = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert not {v for v in settings_variables() if f"`{v}`" not in configuration}
    documented = {name for path in DOCS for name in _VARIABLE.findall(path.read_text(encoding="utf-8"))}
    undocumented = sorted(code_variables() - settings_variables() - documented)
    assert not undocumented, f"read by the code but in no doc: {undocumented}"


# --- `overlord ...` command lines ---

_COMMAND_IN_BLOCK = re.compile(r"(?:^|&&|;|\|)\s*(?:[A-Z_]+=\S+\s+)*(?:[\w./-]*/)?overlord\s+([-a-z].*)$")
_EXEC_FORM = re.compile(r"""\[\s*"overlord"\s*,([^\]]*)\]""")
_PLACEHOLDERS = {"N": "1", "SECONDS": "1", "PARTITION=OFFSET": "0=0",
                 "START/END": "2026-01-01T00:00Z/2026-01-02T00:00Z"}  # any other upper-case word: "x"
_OPTIONAL = re.compile(r"""\[([^\[\]{}"']*)\]""")  # not a JSON list


def commands() -> Iterator[tuple[str, str, bool]]:
    """(where, the words after `overlord`, whether it is an inline mention) of every command line in the docs."""
    for path in MARKDOWN:
        for number, line in prose_and_blocks(path)[1]:
            if found := _COMMAND_IN_BLOCK.search(line):
                yield f"{rel(path)}:{number}", re.sub(r"\s+#.*$", "", found.group(1)), False
        for number, span in code_spans(path):
            if span.startswith("overlord ") and (span[9:10].isalpha() or span[9:10] == "-"):
                yield f"{rel(path)}:{number}", span[len("overlord "):], True
    for path in DOCKER:  # exec forms: CMD ["overlord", "serve", ...], command: ["overlord", ...]
        for number, line in lines(path):
            if found := _EXEC_FORM.search(line):
                yield f"{rel(path)}:{number}", shlex.join(json.loads(f"[{found.group(1)}]")), False


def variants(words: str) -> list[list[str]]:
    """The command line without its optional `[...]` parts, then with each of them (each `a | b` alternative)."""
    parts = _OPTIONAL.split(words)  # required text, optional group, required text, ...
    out = ["".join(parts[::2])]
    for i in range(1, len(parts), 2):
        out += ["".join(p if j % 2 == 0 else alt if j == i else " " for j, p in enumerate(parts))
                for alt in parts[i].split("|")]
    return [[_PLACEHOLDERS.get(t, "x" if re.fullmatch(r"[A-Z][A-Z_]*", t) else t)
             for t in shlex.split(v) if t != "..."] for v in out]


@cache
def _parser() -> argparse.ArgumentParser:
    return overlord_parser()


def parse_error(argv: list[str]) -> str | None:
    """Argparse's complaint about ``overlord ARGV``, or None (``--help`` counts as parsed)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            _parser().parse_args(argv)
        except SystemExit as exc:
            return None if exc.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def names_real_commands(argv: list[str]) -> bool:
    """A mention such as `overlord supervisor`, `overlord index` or `overlord cleanup --orphan-grace`: every word
    is a subcommand or an option of the command it follows (no arguments to check).
    """
    parser = _parser()
    for word in argv:
        subcommands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
        if word in subcommands:
            parser = subcommands[word]
        elif word not in parser._option_string_actions:
            return False
    return True


def logged_by_the_code(span: str) -> bool:
    """`overlord stopped` is a log line the docs quote, not a command."""
    return any(f'"{span}"' in text for text in package_sources().values())


def test_every_command_line_in_the_docs_parses():
    refused = []
    for where, words, inline in commands():
        for argv in variants(words):
            if (error := parse_error(argv)) and not (inline and (
                    names_real_commands(argv) or logged_by_the_code("overlord " + words))):
                refused.append(f"{where}: overlord {shlex.join(argv)}: {error}")
    assert not refused, "the CLI refuses:\n" + "\n".join(refused)


def test_the_docs_have_command_lines_to_check():
    assert sum(1 for _ in commands()) >= 50


# --- metrics ---

_METRIC = re.compile(r"\boverlord_[a-z_]+\b(?!\.py)")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}
_KINDS = {"counter": "counter", "Counter": "counter", "CounterMetricFamily": "counter", "histogram": "histogram",
          "Histogram": "histogram", "Info": "info"}


@cache
def exported_metrics() -> list[re.Pattern[str]]:
    """A pattern per metric ``overlord/metrics.py`` declares (the first argument of its constructor); an f-string's
    fields (``f"overlord_{kind}_slots"``) match any lower-case word. Each takes its type's suffixes.
    """
    patterns = []
    for node in ast.walk(ast.parse((ROOT / "overlord" / "metrics.py").read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first, callee = node.args[0], node.func
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            name = re.escape(first.value)
        elif isinstance(first, ast.JoinedStr):
            name = "".join(re.escape(str(part.value)) if isinstance(part, ast.Constant) else "[a-z]+(?:_[a-z]+)*"
                           for part in first.values)
        else:
            continue
        if not name.startswith("overlord_"):
            continue
        kind = _KINDS.get(callee.id if isinstance(callee, ast.Name) else "", "gauge")
        suffixes = "|".join(_SUFFIXES.get(kind, ()))
        patterns.append(re.compile(f"{name}(?:{suffixes})?" if suffixes else name))
    return patterns


def test_the_metrics_are_read_from_the_code():
    assert len(exported_metrics()) >= 20
    assert all(any(p.fullmatch(n) for p in exported_metrics()) for n in (
        "overlord_records_total", "overlord_task_slots_used", "overlord_build_info", "overlord_supervisor_healthy",
        "overlord_http_request_duration_seconds_bucket", "overlord_query_duration_seconds"))
    assert not any(p.fullmatch("overlord_records_bucket") for p in exported_metrics())


def test_every_metric_the_docs_name_is_exported():
    unknown = [f"{rel(path)}:{number}: {name}" for path in DOCS for number, line in lines(path)
               for name in _METRIC.findall(line) if not any(p.fullmatch(name) for p in exported_metrics())]
    assert not unknown, "overlord/metrics.py exports no such metric:\n" + "\n".join(unknown)


# --- paths ---

_TOP = {p.name for p in ROOT.iterdir()} - {".git"}
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
_BARE_PATH = re.compile(r"(?<![\w./-])(?:" + "|".join(sorted(n for n in _TOP if not n.startswith(".")))
                        + r")/[\w./-]*\.[a-z]{2,5}\b")


GENERATED = "docker/secrets/"
"""What docker/make-secrets.sh writes on the operator's machine (never committed)."""


def quoted_paths(path: Path) -> Iterator[tuple[int, str]]:
    """Relative paths a page links or quotes: `a/b.py`, `dir/`, `top-level-entry/anything`; in docker/'s files
    (comments), bare file paths from a top-level directory.
    """
    if path.suffix != ".md":
        for number, line in lines(path):
            yield from ((number, p) for p in _BARE_PATH.findall(line))
        return
    for number, line in lines(path):
        yield from ((number, link) for link in _LINK.findall(line) if not re.match(r"[a-z]+:", link))
    for number, span in code_spans(path):
        if ("/" in span and not span.startswith("/") and "://" not in span and " " not in span and "..." not in span
                and "{" not in span and (re.search(r"\.[a-z]{2,5}$", span) or span.endswith("/")
                                         or span.split("/")[0] in _TOP)):
            yield number, span


def test_every_path_the_docs_quote_exists():
    missing = [f"{rel(path)}:{number}: {quoted}" for path in DOCS for number, quoted in quoted_paths(path)
               if not quoted.startswith(GENERATED)
               and not any((base / quoted).exists() for base in (ROOT, path.parent))]
    assert not missing, "no such file:\n" + "\n".join(missing)
