"""``docker/kubernetes/`` checked offline: every built-in object against the Kubernetes API schema
(kubernetes-validate, strict), the ServiceMonitor and kustomization by hand, and the objects against
each other and against the settings the overlord reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from overlord.config import ENV_PREFIX, Settings
from overlord.http.auth import LIVENESS_PATHS

pytestmark = pytest.mark.unit

K8S_VERSION = "1.34"
"""The Kubernetes API the manifests are validated against (a schema bundled with kubernetes-validate)."""

MANIFESTS = Path(__file__).parent.parent / "docker" / "kubernetes"
KUSTOMIZATION = MANIFESTS / "kustomization.yaml"
FILES = sorted(p for p in MANIFESTS.glob("*.yaml") if p != KUSTOMIZATION)
DOCS: list[tuple[str, dict[str, Any]]] = [
    (p.name, doc) for p in FILES for doc in yaml.safe_load_all(p.read_text(encoding="utf-8")) if doc]
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
ALERTS = Path(__file__).parent.parent / "docker" / "monitoring" / "alerts.yaml"
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}
EXTERNAL_SECRET = "overlord-secrets"  # created by the operator (README.md), never committed
OPT_IN = {"spark-on-kubernetes.yaml"}  # applied by hand for OVERLORD_SPARK_MASTER=k8s://..., not by the kustomization


def _objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in DOCS if doc["kind"] == kind]


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [doc for doc in _objects(kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _workloads() -> list[dict[str, Any]]:
    return [doc for _, doc in DOCS if doc["kind"] in WORKLOAD_KINDS]


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in a nested document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _pod_env(workload: dict[str, Any], container: int = 0) -> dict[str, str]:
    """The container's environment as Kubernetes builds it: envFrom ConfigMaps, then env, with
    ``$(VAR)`` expanded from the variables before it; secrets and the downward API get stand-ins.
    """
    spec = _containers(workload)[container]
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        env.update(_one("ConfigMap", source["configMapRef"]["name"])["data"])
    stand_ins = {"metadata.name": "overlord-0", "status.podIP": "10.1.2.3"}
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), var["value"])
        elif "fieldRef" in var["valueFrom"]:
            env[var["name"]] = stand_ins[var["valueFrom"]["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["configMapKeyRef"]
            value = _one("ConfigMap", ref["name"])["data"].get(ref["key"])
            assert value is not None or ref.get("optional"), f"{var['name']}: no key {ref['key']} in {ref['name']}"
            if value is not None:
                env[var["name"]] = value
        else:
            env[var["name"]] = "postgresql+psycopg://u:p@db:5432/overlord"  # a secretKeyRef
    return env


@pytest.mark.parametrize(("source", "doc"), [d for d in DOCS if (d[1]["apiVersion"], d[1]["kind"]) not in CUSTOM_KINDS],
                         ids=lambda v: v if isinstance(v, str) else f"{v['kind']}/{v['metadata']['name']}")
def test_every_built_in_object_is_valid_for_the_kubernetes_api_with_no_unknown_field(source, doc):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{source}: {doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, exc.path))}: "
                    f"{exc.message}")


def test_every_object_lives_in_the_overlord_namespace_and_names_are_unique():
    assert _one("Namespace", "overlord")
    seen = set()
    for source, doc in DOCS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == "overlord", f"{source}: {doc['kind']} outside the namespace"
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{source}: {key} defined twice"
        seen.add(key)


def test_the_service_monitor_scrapes_every_overlords_metrics_with_the_token_from_the_secret():
    (monitor,) = _objects("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    selected = [s for s in _objects("Service") if _matches(monitor["spec"]["selector"]["matchLabels"],
                                                           s["metadata"].get("labels", {}))]
    assert len(selected) == 1, f"the ServiceMonitor selects {len(selected)} Services (each pod scraped that often)"
    service = selected[0]
    # The leader-only `overlord` Service would hide the standby: scrape the one listing every pod.
    assert service["spec"].get("publishNotReadyAddresses") is True
    assert _matches(service["spec"]["selector"], _one("StatefulSet", "overlord")["spec"]["template"]["metadata"]
                    ["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    # /metrics needs credentials (only liveness paths are open): a bearer token with the read role.
    assert "/metrics" not in LIVENESS_PATHS
    assert endpoint["authorization"] == {"type": "Bearer",
                                         "credentials": {"name": EXTERNAL_SECRET, "key": "metrics-token"}}


def test_the_prometheus_rule_carries_exactly_the_alert_rules_of_docker_monitoring():
    (rule,) = _objects("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    # a copy of alerts.yaml (promtool-tested in tests/test_monitoring.py): they must not drift apart
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    (monitor,) = _objects("ServiceMonitor")  # the scraped series get job="overlord", which the rules select
    assert any('job="overlord"' in r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])
    (service,) = [s for s in _objects("Service") if _matches(monitor["spec"]["selector"]["matchLabels"],
                                                             s["metadata"].get("labels", {}))]
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "overlord"


def test_the_kustomization_lists_exactly_the_manifest_files():
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["namespace"] == "overlord"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed)), "a file listed twice"
    assert set(listed) == {p.name for p in FILES} - OPT_IN
    assert not list(MANIFESTS.glob("*.yml")), "use .yaml: kustomization and this test read only *.yaml"


def test_every_overlord_variable_in_the_manifests_is_a_setting_the_code_reads():
    known = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    used = set()
    for source, doc in DOCS:
        for key, value in _walk(doc):
            if key in ("name", "key") and isinstance(value, str) and value.startswith(ENV_PREFIX):
                used.add((source, value))
        if doc["kind"] == "ConfigMap":
            used |= {(source, key) for key in doc["data"] if key.startswith(ENV_PREFIX)}
    unknown = sorted((source, name) for source, name in used if name not in known)
    assert used and not unknown, f"not read by overlord.config.Settings: {unknown}"


def test_the_overlords_environment_loads_as_settings_with_each_pods_own_addresses():
    env = _pod_env(_one("StatefulSet", "overlord"))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        settings = Settings.from_env()
    assert settings.deep_storage == "s3://segments/"
    assert settings.spark_master == "spark://spark-master:7077"
    assert settings.kafka_bootstrap_servers
    assert settings.advertised_url == "http://overlord-0.overlord-headless.overlord.svc.cluster.local:8090"
    assert settings.advertised_url in (settings.public_urls or ())  # a standby's redirect lands on an allowed Host
    assert settings.spark_conf["spark.driver.host"] == "10.1.2.3"
    assert settings.spark_conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert "spark.executor.memory" in settings.spark_conf
    assert "$(" not in json.dumps(dict(env)), "a $(VAR) left unexpanded"


def test_dependent_variables_are_defined_before_the_values_that_use_them():
    for workload in _workloads():
        for container in _containers(workload):
            defined = {name for source in container.get("envFrom", [])
                       for name in _one("ConfigMap", source["configMapRef"]["name"])["data"]}
            for var in container.get("env", []):
                for needed in re.findall(r"\$\((\w+)\)", var.get("value", "")):
                    assert needed in defined, f"{workload['metadata']['name']}: {var['name']} uses {needed} first"
                defined.add(var["name"])


def test_the_secret_files_the_settings_name_are_mounted_read_only_from_the_secret():
    pods = [(_one("StatefulSet", "overlord"), ("OVERLORD_AUTH_FILE", "AWS_SHARED_CREDENTIALS_FILE")),
            (_one("Deployment", "spark-worker"), ("AWS_SHARED_CREDENTIALS_FILE",))]
    for workload, variables in pods:
        env, container = _pod_env(workload), _containers(workload)[0]
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        for variable in variables:
            path = Path(env[variable])
            mount = next((m for m in container["volumeMounts"] if Path(m["mountPath"]) == path.parent), None)
            assert mount, f"{workload['metadata']['name']}: nothing mounted at {path.parent} ({variable})"
            assert mount.get("readOnly") is True
            secret = volumes[mount["name"]]["secret"]
            assert secret["secretName"] == EXTERNAL_SECRET
            assert path.name in {item["path"] for item in secret["items"]}
    assert not _objects("Secret"), "secret values are never committed: create overlord-secrets (README.md)"


def test_every_service_selects_the_pods_of_some_workload_and_targets_their_ports():
    for service in _objects("Service"):
        pods = [w for w in _workloads() if _matches(service["spec"]["selector"],
                                                    w["spec"]["template"]["metadata"]["labels"])]
        assert pods, f"Service {service['metadata']['name']} selects no pods"
        for port in service["spec"]["ports"]:
            for workload in pods:
                declared = {p.get("name") for c in _containers(workload) for p in c.get("ports", [])} | {
                    p["containerPort"] for c in _containers(workload) for p in c.get("ports", [])}
                assert port["targetPort"] in declared, f"{service['metadata']['name']}: {port['targetPort']}"


def test_every_workload_selector_and_disruption_budget_matches_its_pods():
    for workload in _workloads():
        assert _matches(workload["spec"]["selector"]["matchLabels"], workload["spec"]["template"]["metadata"]["labels"])
    (budget,) = _objects("PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert _matches(budget["spec"]["selector"]["matchLabels"],
                    _one("StatefulSet", "overlord")["spec"]["template"]["metadata"]["labels"])


def test_every_probe_port_is_a_declared_container_port():
    for workload in _workloads():
        for container in _containers(workload):
            ports = container.get("ports", [])
            declared = {p.get("name") for p in ports} | {p["containerPort"] for p in ports}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in container:
                    check = container[probe].get("httpGet") or container[probe].get("tcpSocket")
                    assert check["port"] in declared, f"{container['name']} {probe}: port {check['port']}"


def test_the_overlord_probes_liveness_and_leadership_without_credentials():
    (container,) = _containers(_one("StatefulSet", "overlord"))
    paths = {probe: container[probe]["httpGet"]["path"] for probe in ("startupProbe", "livenessProbe",
                                                                      "readinessProbe")}
    assert paths == {"startupProbe": "/health", "livenessProbe": "/health", "readinessProbe": "/health/leader"}
    assert "/health" in LIVENESS_PATHS  # a probe sends no credentials
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60  # two JVMs start first
    assert container["command"] == ["overlord", "serve", "--host", "0.0.0.0", "--port", "8090"]


def test_every_configmap_and_secret_referenced_is_defined_here_or_is_the_external_secret():
    config_maps = {doc["metadata"]["name"] for doc in _objects("ConfigMap")}
    secrets = {doc["metadata"]["name"] for doc in _objects("Secret")} | {EXTERNAL_SECRET}
    referenced = 0
    for source, doc in DOCS:
        for key, value in _walk(doc):
            if key in ("configMapRef", "configMapKeyRef", "configMap"):
                referenced += 1
                assert value["name"] in config_maps, f"{source}: ConfigMap {value['name']} is not defined"
            elif key in ("secretRef", "secretKeyRef"):
                referenced += 1
                assert value["name"] in secrets, f"{source}: Secret {value['name']} is not defined"
            elif key == "secret" and isinstance(value, dict):
                referenced += 1
                assert value["secretName"] in secrets, f"{source}: Secret {value['secretName']} is not defined"
            elif key == "credentials" and isinstance(value, dict):  # the ServiceMonitor's token
                referenced += 1
                assert value["name"] in secrets, f"{source}: Secret {value['name']} is not defined"
    assert referenced


def test_every_pod_runs_as_the_images_non_root_user_without_privileges():
    for workload in _workloads():
        pod = workload["spec"]["template"]["spec"]
        name = workload["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod.get("enableServiceLinks") is False, f"{name}: Service variables collide with SPARK_*/OVERLORD_*"
        for container in _containers(workload):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            if context.get("readOnlyRootFilesystem"):
                assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}, f"{name}: no writable /tmp"


def test_the_spark_cluster_is_reached_by_the_overlords_and_itself_only():
    spark_pods = [w["spec"]["template"]["metadata"]["labels"] for w in _workloads()
                  if w["metadata"]["name"].startswith("spark-")]
    overlord_pods = _one("StatefulSet", "overlord")["spec"]["template"]["metadata"]["labels"]
    guarding = [p for p in _objects("NetworkPolicy") if all(_matches(p["spec"]["podSelector"]["matchLabels"], labels)
                                                            for labels in spark_pods)]
    assert guarding and all("Ingress" in p["spec"]["policyTypes"] for p in guarding)
    for policy in guarding:
        for rule in policy["spec"]["ingress"]:
            sources = rule.get("from")
            assert sources, f"NetworkPolicy {policy['metadata']['name']} admits anyone"
            for source in sources:
                allowed = source["podSelector"]["matchLabels"]
                assert set(source) == {"podSelector"}  # this namespace's pods only
                assert _matches(allowed, overlord_pods) or all(_matches(allowed, labels) for labels in spark_pods)
    master = _one("Service", "spark-master")
    assert master["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert {p["port"] for p in master["spec"]["ports"]} == {7077, 8080}


def test_the_overlord_api_is_open_to_all_under_its_network_policy():
    overlord_pods = _one("StatefulSet", "overlord")["spec"]["template"]["metadata"]["labels"]
    guarding = [p for p in _objects("NetworkPolicy") if _matches(p["spec"]["podSelector"]["matchLabels"],
                                                                 overlord_pods)]
    assert guarding
    for policy in guarding:
        assert any("from" not in rule and {p["port"] for p in rule.get("ports", [])} == {8090}
                   for rule in policy["spec"]["ingress"]), policy["metadata"]["name"]
