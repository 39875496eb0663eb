"""``docker/monitoring/`` checked with Prometheus' own tool: the alert rules load and their unit
tests pass (``promtool``), the dashboard's queries are valid PromQL, every metric the rules and the
dashboard name is one the overlord exports, and the exposition passes ``promtool check metrics``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from overlord.metrics import Metrics, ScrapeSources

MONITORING = Path(__file__).parent.parent / "docker" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
DASHBOARD = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install prometheus (Debian's package has it)"
    return subprocess.run([found, *args], input=stdin, capture_output=True, text=True, timeout=60)


def sample_metrics() -> Metrics:
    """A registry with a sample in every family (no overlord needed: its sources are given)."""
    metrics = Metrics(ScrapeSources(statuses=lambda: [], leader_epoch=lambda: 3,
                                    slot_use=lambda: {"task": (8, 2, 1), "compaction_task": (1, 1, 3)},
                                    resident_use=lambda: (40, 90),
                                    visible_totals=lambda: {"events": (12, 4096)}))
    metrics.task_finished("events", None, 1.5)
    metrics.http_request("GET", "/status", 200, 0.01)
    metrics.compactions.labels("events", "ok").inc()
    metrics.query_seconds.labels("ok").observe(0.2)
    metrics.query_engine_restarts.labels("killed").inc()
    metrics.last_publish.labels("events").set(1.0)
    return metrics


def exported_names() -> set[str]:
    """Every sample name ``/metrics`` can carry."""
    names = set()
    for family in sample_metrics().registry.collect():
        names |= {family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",))}
    return names


def dashboard_queries() -> list[str]:
    return [target["expr"] for panel in DASHBOARD["panels"] for target in panel["targets"]]


def alert_queries() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


@pytest.mark.unit
def test_the_alert_rules_load_and_fire_as_their_unit_tests_expect():
    checked = promtool("check", "rules", str(ALERTS))
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(MONITORING / "alerts.test.yaml"))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.unit
def test_the_compose_prometheus_config_is_valid_and_loads_the_alerts(tmp_path):
    """``promtool check config`` also loads the rule files and needs the token file: a copy of both, the
    token where compose mounts its secret replaced by a file here.
    """
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text(encoding="utf-8"))
    assert config["rule_files"] == [ALERTS.name]
    (job,) = config["scrape_configs"]
    token = job["authorization"]["credentials_file"]
    assert token == "/run/secrets/metrics-token"
    (tmp_path / "metrics-token").write_text("a-token")
    shutil.copy(ALERTS, tmp_path / ALERTS.name)
    (tmp_path / "prometheus.yml").write_text(
        (MONITORING / "prometheus.yml").read_text(encoding="utf-8").replace(token, str(tmp_path / "metrics-token")))
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0 and "SUCCESS: 1 rule files found" in checked.stdout, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_queries())} rules found" in checked.stdout, checked.stdout


@pytest.mark.unit
def test_runbook_links_are_absolute_under_the_external_label_prometheus_sets():
    """Alertmanager shows runbook_url as a link: a relative path is a dead one. The rules build it from the
    external label ``runbook_base`` (``$externalLabels`` in annotation templates), set in prometheus.yml.
    """
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text(encoding="utf-8"))
    base = config["global"]["external_labels"]["runbook_base"]
    assert re.fullmatch(r"https://[^\s/]+(/\S*)?", base) and not base.endswith("/"), base
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    for rule in rules:
        assert rule["annotations"]["runbook_url"] == (
            "{{ $externalLabels.runbook_base }}/operations.md#" + rule["alert"].lower()), rule["alert"]
    # promtool 2.42 cannot set external labels in unit tests: there the label renders empty
    tests = yaml.safe_load((MONITORING / "alerts.test.yaml").read_text(encoding="utf-8"))
    expected = [a["exp_annotations"]["runbook_url"] for g in tests["tests"] for case in g.get("alert_rule_test", [])
                for a in case.get("exp_alerts", [])]
    assert expected and all(url.startswith("/operations.md#") for url in expected)


@pytest.mark.unit
def test_the_dashboards_queries_are_valid_promql(tmp_path):
    queries = [q.replace("$datasource", ".*") for q in dashboard_queries()]
    assert len(queries) >= 20
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": q} for i, q in enumerate(queries)]}]}
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", str(tmp_path / "dashboard.rules.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.unit
def test_every_metric_the_rules_and_the_dashboard_name_is_exported():
    exported = exported_names()
    assert {"overlord_records_total", "overlord_task_duration_seconds_bucket", "overlord_leader"} <= exported
    for query in alert_queries() + dashboard_queries() + [DASHBOARD["templating"]["list"][1]["definition"]]:
        for name in re.findall(r"\b((?:overlord|process)_[a-z_]+)\b", query):
            assert name in exported, f"{name} (in {query!r}) is not a metric the overlord exports"


@pytest.mark.unit
def test_the_exposition_follows_prometheus_conventions():
    linted = promtool("check", "metrics", stdin=sample_metrics().exposition().decode())
    assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr
