"""``docker/`` checked without a Docker engine: the compose file is loaded and every service, port,
volume, secret and variable the overlord needs is defined and agrees with the settings the code
reads and with the other services' own configuration.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url

from overlord.config import ENV_PREFIX, Settings

DOCKER = Path(__file__).parent.parent / "docker"
COMPOSE: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
SERVICES: dict[str, Any] = COMPOSE["services"]
OVERLORD_ENV: dict[str, str] = {k: str(v) for k, v in SERVICES["overlord"]["environment"].items()}
DOCKERFILE = (DOCKER / "Dockerfile").read_text(encoding="utf-8")


def _command(service: str) -> str:
    command = SERVICES[service].get("command") or SERVICES[service].get("entrypoint")
    return command if isinstance(command, str) else " ".join(command)


def _flag(service: str, flag: str) -> str:
    found = re.search(rf"{flag}[ =](\S+)", _command(service))
    assert found, f"{service} has no {flag}"
    return found.group(1)


def test_every_service_the_overlord_needs_is_there_and_healthy_before_it_starts():
    assert {"kafka", "postgres", "minio", "create-bucket", "spark-master", "spark-worker", "overlord"} <= set(SERVICES)
    for name, service in SERVICES.items():
        if name != "create-bucket":  # a one-shot job; the overlord waits for it to complete
            assert "healthcheck" in service, f"{name} has no healthcheck"
        for needed, condition in service.get("depends_on", {}).items():
            assert needed in SERVICES, f"{name} depends on an undefined service {needed}"
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[needed]
    assert SERVICES["overlord"]["depends_on"]["create-bucket"]["condition"] == "service_completed_successfully"


def test_the_overlord_settings_load_and_name_only_variables_the_code_reads():
    overlord_vars = {k for k in OVERLORD_ENV if k.startswith(ENV_PREFIX)}
    assert overlord_vars <= {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}, overlord_vars
    with pytest.MonkeyPatch.context() as mp:
        for key, value in OVERLORD_ENV.items():
            mp.setenv(key, value)
        settings = Settings.from_env()
    assert settings.spark_master.startswith("spark://") and settings.deep_storage.startswith("s3://")
    assert settings.auth_file == f"/run/secrets/{SERVICES['overlord']['secrets'][0]}"
    assert set(SERVICES["overlord"]["secrets"]) <= set(COMPOSE["secrets"])


def test_the_overlord_is_wired_to_the_other_services_as_they_are_configured():
    with pytest.MonkeyPatch.context() as mp:
        for key, value in OVERLORD_ENV.items():
            mp.setenv(key, value)
        settings = Settings.from_env()
    db, pg = make_url(settings.database_url), SERVICES["postgres"]["environment"]
    assert (db.host, db.port or 5432, db.username, db.password, db.database) == (
        "postgres", 5432, pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"])

    advertised = SERVICES["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"//{settings.kafka_bootstrap_servers}" in advertised

    master = urlsplit(settings.spark_master)
    assert (master.hostname, str(master.port)) == (_flag("spark-master", "--host"), _flag("spark-master", "--port"))
    assert settings.spark_master in _command("spark-worker")
    assert settings.spark_conf["spark.driver.host"] == SERVICES["overlord"]["hostname"]

    bucket = urlsplit(settings.deep_storage).netloc
    assert f"mb -p s3/{bucket}" in _command("create-bucket")
    endpoint, minio = urlsplit(OVERLORD_ENV["AWS_ENDPOINT_URL"]), SERVICES["minio"]["environment"]
    assert (endpoint.hostname, endpoint.port) == ("minio", 9000)
    assert (OVERLORD_ENV["AWS_ACCESS_KEY_ID"], OVERLORD_ENV["AWS_SECRET_ACCESS_KEY"]) == (
        minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])
    assert f"alias set s3 http://minio:9000 {minio['MINIO_ROOT_USER']} {minio['MINIO_ROOT_PASSWORD']}" in \
        _command("create-bucket")


def test_ports_volumes_and_the_image_agree():
    port = re.search(r"EXPOSE (\d+)", DOCKERFILE).group(1)
    assert f'"--port", "{port}"' in DOCKERFILE
    assert f"{port}:{port}" in SERVICES["overlord"]["ports"]
    assert f"localhost:{port}/health" in " ".join(SERVICES["overlord"]["healthcheck"]["test"])
    assert _flag("spark-master", "--webui-port") in " ".join(SERVICES["spark-master"]["healthcheck"]["test"])
    assert _flag("spark-worker", "--webui-port") in " ".join(SERVICES["spark-worker"]["healthcheck"]["test"])

    used = {v.split(":")[0] for s in SERVICES.values() for v in s.get("volumes", []) if not v.startswith((".", "/"))}
    assert used == set(COMPOSE["volumes"])

    # Executors run the driver's Python at the driver's path: the Spark services use the overlord's image.
    assert SERVICES["spark-master"]["build"] == SERVICES["spark-worker"]["build"] == SERVICES["overlord"]["build"]
    assert "SPARK_HOME=" in DOCKERFILE
    pyproject = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text(encoding="utf-8"))
    for package in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        name = package.rstrip("*")
        assert f"COPY {name} {name}" in DOCKERFILE, f"the image lacks the {name} package"


def test_the_spark_conf_setting_is_a_json_object_of_strings():
    assert json.loads(OVERLORD_ENV["OVERLORD_SPARK_CONF"])
    with pytest.raises(SystemExit, match="OVERLORD_SPARK_CONF"), pytest.MonkeyPatch.context() as mp:
        mp.setenv("OVERLORD_DATABASE_URL", "postgresql+psycopg://x@y/z")
        mp.setenv("OVERLORD_SPARK_CONF", "spark.executor.memory=2g")
        Settings.from_env()
