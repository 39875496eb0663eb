"""The documentation holds together: every relative link in the README and ``docs/`` reaches a file
that exists and, where it names one, a heading of that file; every page of ``docs/`` is linked from
the README; and the Alertmanager runbook links of the alert rules reach their entries.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
         ROOT / "docker" / "kubernetes" / "README.md"]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings (outside code blocks)."""
    found, code = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and (heading := re.match(r"^#+ (.*)$", line)):
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [link for link in _LINK.findall(text) if not link.startswith(("http://", "https://", "mailto:"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path):
    for link in links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link} names no file"
        if anchor:
            assert anchor in anchors(target), f"{page.name}: {link} names no heading of {target.name}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in links(ROOT / "README.md")}
    assert {p.resolve() for p in (ROOT / "docs").glob("*.md")} <= linked


def test_every_alert_links_to_its_runbook_entry():
    rules = yaml.safe_load((ROOT / "docker" / "monitoring" / "alerts.yaml").read_text())
    base = "{{ $externalLabels.runbook_base }}/"  # where docs/ is served (prometheus.yml's external label)
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(base), f"{rule['alert']}: {url} is not under runbook_base"
        path, _, anchor = url.removeprefix(base).partition("#")
        assert anchor == rule["alert"].lower() and anchor in anchors(ROOT / "docs" / path), rule["alert"]
