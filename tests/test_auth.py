"""Authentication and roles on real HTTP: every route of the app's route table but liveness needs
credentials, the read role cannot change anything, and pydruid connects with HTTP Basic as to Druid.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from overlord.http.auth import LIVENESS_PATHS, AuthFile, required_role
from tests.helpers import READER, WRITER, overlord_cli


def routes(table: list[Any], prefix: str = "") -> list[tuple[str, str]]:
    """Every (method, path) of a route table, included routers too, path parameters filled in."""
    found = []
    for route in table:
        if isinstance(route, APIRoute | Route):
            path = re.sub(r"\{[^}]+\}", "x", prefix + route.path)
            found += [(method, path) for method in sorted(route.methods or ()) if method != "HEAD"]
        elif hasattr(route, "original_router"):  # FastAPI's included router
            found += routes(route.original_router.routes, prefix + route.include_context.prefix)
        else:
            raise AssertionError(f"a route of an unknown kind: {route!r}")
    return found


def test_every_route_but_liveness_needs_credentials_and_writes_need_the_write_role(secured):
    url, app = secured
    table = routes(app.routes)
    assert len(table) > 20 and any(p == "/openapi.json" for _, p in table)
    with httpx.Client(base_url=url, timeout=30) as anonymous, \
            httpx.Client(base_url=url, timeout=30, auth=READER) as reader, \
            httpx.Client(base_url=url, timeout=30, auth=(READER[0], "wrong")) as wrong:
        for method, path in table:
            answer = anonymous.request(method, path, json={})
            if path in LIVENESS_PATHS:
                assert answer.status_code == 200, (method, path)
                continue
            assert answer.status_code == 401, (method, path, answer.status_code)
            assert answer.headers["www-authenticate"].startswith("Basic")
            assert wrong.request(method, path, json={}).status_code == 401, (method, path)
            if required_role(method, path) == "write":
                refused = reader.request(method, path, json={})
                assert refused.status_code == 403 and "write role" in refused.json()["errorMessage"], (method, path)


def test_the_right_credentials_pass_for_reads_and_writes(secured, token, make_topic, datasource):
    url, _app = secured
    from tests.helpers import spec_json

    with httpx.Client(base_url=url, timeout=30, auth=READER) as reader:
        assert reader.get("/druid/indexer/v1/supervisor").status_code == 200
        assert reader.post("/druid/v2/sql", json={"query": "SELECT 1 AS one"}).json() == [{"one": 1}]
    bearer = {"Authorization": f"Bearer {token[0]}"}
    with httpx.Client(base_url=url, timeout=30, headers=bearer) as ci:
        created = ci.post("/druid/indexer/v1/supervisor", json=spec_json(datasource, make_topic(1)))
        assert created.status_code == 200, created.text
        assert ci.post(f"/druid/indexer/v1/supervisor/{datasource}/terminate").status_code == 200
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": "Bearer not-a-token"}) as bad:
        assert bad.get("/druid/indexer/v1/supervisor").status_code == 401


def test_pydruid_connects_with_basic_credentials(secured):
    from pydruid.db import connect
    from pydruid.db.exceptions import Error

    url, _app = secured
    port = int(url.rsplit(":", 1)[1])
    cursor = connect(host="127.0.0.1", port=port, path="/druid/v2/sql", scheme="http",
                     user=READER[0], password=READER[1]).cursor()
    cursor.execute("SELECT 1 + 1 AS two")
    assert cursor.fetchall() == [(2,)]
    with pytest.raises(Error):
        connect(host="127.0.0.1", port=port, path="/druid/v2/sql", scheme="http", user=READER[0],
                password="wrong").cursor().execute("SELECT 1")


def test_serve_refuses_to_start_without_credentials_unless_told_to_run_open(stack):
    refused = overlord_cli("serve", "--port", "1", env={**stack.as_env(), "OVERLORD_AUTH_FILE": ""})
    assert refused.returncode != 0 and "refusing to start without authentication" in refused.stderr
    assert "--insecure-open" in refused.stderr


def test_an_auth_file_with_plain_passwords_is_refused(tmp_path: Path):
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"users": {"admin": {"role": "write", "passwordHash": "hunter2"}}}))
    with pytest.raises(SystemExit) as refused:
        AuthFile.load(path)
    message = str(refused.value)
    assert "users.admin.passwordHash:" in message and "overlord auth hash-password" in message
    assert "pydantic" not in message  # no library's raw dump: the field, what is wrong, what to write


def test_the_command_line_client_sends_credentials_from_the_environment(secured):
    url, _app = secured
    anonymous = overlord_cli("supervisor", "list", "--url", url)
    assert anonymous.returncode == 2 and "401" in anonymous.stderr and "OVERLORD_USER" in anonymous.stderr
    listed = overlord_cli("supervisor", "list", "--url", url,
                          env={"OVERLORD_USER": READER[0], "OVERLORD_PASSWORD": READER[1]})
    assert listed.returncode == 0, listed.stderr


def test_a_page_of_another_site_cannot_change_anything_with_the_browsers_credentials(secured, make_topic,
                                                                                    datasource):
    """CSRF: a browser sends cached Basic credentials with a form another site's page submits."""
    from tests.helpers import spec_json

    url, _app = secured
    with httpx.Client(base_url=url, timeout=30, auth=WRITER) as browser:
        assert browser.post("/druid/indexer/v1/supervisor", json=spec_json(datasource, make_topic(1)),
                            headers={"Origin": url}).status_code == 200  # the console itself
        for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Origin": "null"}):
            refused = browser.post(f"/druid/indexer/v1/supervisor/{datasource}/terminate", headers=headers)
            assert refused.status_code == 403 and "another site" in refused.json()["errorMessage"], headers
        reads = browser.get("/druid/indexer/v1/supervisor", headers={"Origin": "https://evil.example"})
        assert reads.status_code == 200  # reads are not changes (and CORS keeps their answer from that page)
        assert browser.post(f"/druid/indexer/v1/supervisor/{datasource}/terminate").status_code == 200  # no Origin


def test_every_change_is_recorded_with_who_what_when_and_from_where(secured, token, make_topic, datasource):
    """The audit log and the spec history name the authenticated user or token; reads and refusals are not changes."""
    url, _app = secured
    from tests.helpers import spec_json

    supervisor = f"/druid/indexer/v1/supervisor/{datasource}"
    with httpx.Client(base_url=url, timeout=30, auth=WRITER) as writer, \
            httpx.Client(base_url=url, timeout=30, auth=READER) as reader, \
            httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token[0]}"}) as ci:
        assert writer.post("/druid/indexer/v1/supervisor", json=spec_json(datasource, make_topic(1)),
                           headers={"X-Druid-Comment": "first load"}).status_code == 200
        assert writer.post(f"{supervisor}/suspend").status_code == 200
        assert writer.post(f"{supervisor}/suspend").status_code == 400  # already suspended: recorded as refused
        assert reader.post(f"{supervisor}/resume").status_code == 403  # no write role: never reached the change
        assert reader.post("/druid/v2/sql", json={"query": "SELECT 1 AS one"}).status_code == 200  # a read
        assert writer.post(f"{supervisor}%00/suspend").status_code == 400  # a NUL: refused, and still recorded
        assert ci.post(f"{supervisor}/terminate").status_code == 200

        audit = reader.get("/druid/indexer/v1/audit", params={"max": 50}).json()
        history = reader.get(f"{supervisor}/history").json()
    ours = [(row["author"], row["method"], row["path"], row["status"], row["comment"]) for row in audit
            if datasource in row["path"] or row["comment"] == "first load"]
    assert ours == [
        ("ci", "POST", f"{supervisor}/terminate", 200, None),
        (WRITER[0], "POST", f"{supervisor}\\x00/suspend", 400, None),
        (WRITER[0], "POST", f"{supervisor}/suspend", 400, None),
        (WRITER[0], "POST", f"{supervisor}/suspend", 200, None),
        (WRITER[0], "POST", "/druid/indexer/v1/supervisor", 200, "first load"),
    ]
    assert all(row["remote_address"] == "127.0.0.1" and row["at"] for row in audit[:5])
    assert [(entry["author"], entry["suspended"], entry["terminated"]) for entry in history] == [
        ("ci", False, True), (WRITER[0], True, False), (WRITER[0], False, False)]
