"""Settings come from OVERLORD_* variables or secret files, bad ones name the variable, and the documented table
(docs/configuration.md) is the code's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from overlord.config import Settings, settings_table

CONFIGURATION = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_the_documented_configuration_table_is_generated_from_the_settings() -> None:
    assert settings_table() in CONFIGURATION.read_text(), (
        "regenerate the table in docs/configuration.md with overlord.config.settings_table()")


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERLORD_DATABASE_URL", "postgresql+psycopg://u@db/x")
    monkeypatch.setenv("OVERLORD_TASK_SLOTS", "3")
    settings = Settings.from_env()
    assert (settings.database_url, settings.task_slots, settings.deep_storage) == (
        "postgresql+psycopg://u@db/x", 3, "./deep-storage")


@pytest.mark.parametrize(("env", "message"), [
    ({}, "OVERLORD_DATABASE_URL: is not set"),
    ({"OVERLORD_DATABASE_URL": "x", "OVERLORD_QUERY_MAX_ROWS": "0"}, "OVERLORD_QUERY_MAX_ROWS: input should be"),
    ({"OVERLORD_DATABASE_URL": "x", "OVERLORD_QUERY_MAX_ROWS": "-3"}, "OVERLORD_QUERY_MAX_ROWS: input should be"),
    ({"OVERLORD_DATABASE_URL": "x", "OVERLORD_TASK_SLOTS": "many"}, "OVERLORD_TASK_SLOTS: input should be"),
    ({"OVERLORD_DATABASE_URL": "x", "OVERLORD_QUERY_CPUS": "one"}, "OVERLORD_QUERY_CPUS: .*a cpu list"),
    ({"OVERLORD_DATABASE_URL": "x", "OVERLORD_QUERY_CPUS": "0-4095"}, "OVERLORD_QUERY_CPUS: .*does not give"),
])
def test_a_bad_setting_exits_naming_the_variable(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                 message: str) -> None:
    monkeypatch.delenv("OVERLORD_DATABASE_URL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit, match=message):
        Settings.from_env()


def test_query_cpus_name_the_cpus_of_a_linux_cpu_list(monkeypatch: pytest.MonkeyPatch) -> None:
    from overlord.config import cpu_list

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(8)))
    assert cpu_list("1") == {1} and cpu_list("2-3,5") == {2, 3, 5} and cpu_list(" 0 , 6-7") == {0, 6, 7}


def test_keyword_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OVERLORD_DEEP_STORAGE", "s3://from-env")
    assert Settings(database_url="x", deep_storage="/given").deep_storage == "/given"


def test_settings_come_from_secret_files_when_their_variable_is_unset(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """Docker and Kubernetes secrets are files: a password need not sit in the environment."""
    (tmp_path / "OVERLORD_DATABASE_URL").write_text("postgresql+psycopg://u:secret@db/x\n")
    (tmp_path / "OVERLORD_TASK_SLOTS").write_text("5")
    monkeypatch.delenv("OVERLORD_DATABASE_URL", raising=False)
    monkeypatch.setenv("OVERLORD_SECRETS_DIR", str(tmp_path))
    monkeypatch.setenv("OVERLORD_TASK_SLOTS", "3")  # a variable that is set wins over its file
    settings = Settings.from_env()
    assert (settings.database_url, settings.task_slots) == ("postgresql+psycopg://u:secret@db/x", 3)
    monkeypatch.setenv("OVERLORD_SECRETS_DIR", str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match="OVERLORD_SECRETS_DIR"):
        Settings.from_env()
