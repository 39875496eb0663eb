"""The console in a real browser: Debian's chromium (from the OS packages, never downloaded)
driven by Playwright, against a real overlord on the embedded stack with a running supervisor.

Screenshots go to ``test-artifacts/console/`` (the README's pictures are copies of them).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from overlord.coordinator.duties import Coordinator
from overlord.dev.sample_data import create_topic, make_sample_events, produce
from overlord.http.app import create_app
from segment_store import visible_segments
from tests.helpers import (
    READER,
    assert_exact,
    committed_total,
    merged,
    published_table,
    served,
    spec_json,
    start_overlord,
    wait_until,
)

ARTIFACTS = Path(__file__).parent.parent / "test-artifacts" / "console"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])  # root in CI
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def live(stack, engine, spark, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """An overlord serving the console, with one supervisor that has published what was produced."""
    datasource, topic = f"ds_{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
    create_topic(stack.bootstrap_servers, topic, 2)
    sample = make_sample_events(4_000, bad_every=1_000, seed=61)
    produce(stack.bootstrap_servers, topic, sample.records, 2)
    overlord = start_overlord(stack, engine, spark, str(tmp_path_factory.mktemp("deep")))
    try:
        overlord.submit(spec_json(datasource, topic))
        wait_until(lambda: committed_total(overlord.engine, datasource) == len(sample.records), "the first publish")
        coordinator = Coordinator(overlord)
        with served(create_app(overlord, authenticator=None, coordinator=coordinator)) as url:
            yield {"url": url, "overlord": overlord, "coordinator": coordinator, "datasource": datasource,
                   "topic": topic, "sample": sample, "produced": [sample]}
    finally:
        overlord.stop(grace_s=10)
        overlord.engine.dispose()


@pytest.fixture()
def prompt_answers() -> list[str]:
    """What the next prompts are answered with, in order (the default value once it is empty)."""
    return []


@pytest.fixture()
def page(browser: Browser, live: dict[str, Any], prompt_answers: list[str]) -> Iterator[Page]:
    opened = browser.new_page(viewport={"width": 1400, "height": 1000})

    def answer(dialog: Any) -> None:  # every action asks for a confirmation: say yes
        dialog.accept(prompt_answers.pop(0) if dialog.type == "prompt" and prompt_answers else None)

    opened.on("dialog", answer)
    opened.goto(live["url"])
    yield opened
    opened.close()


def test_supervisor_lag_tasks_segments_and_parse_errors_appear_and_update_in_place(page, live, stack):
    datasource, sample = live["datasource"], live["sample"]
    card = page.locator(f'.supervisor[data-id="{datasource}"]')
    expect(card.locator('[data-role="state"]')).to_have_text("RUNNING")
    expect(card.locator('[data-role="lag"]')).to_have_text("0")
    expect(card.locator("svg.chart.lag polyline")).to_have_count(2)  # the band: each 10-s step's max and min
    expect(card.locator("svg.chart.tasks rect.ok").first).to_be_attached()  # a step with a published task
    expect(card.locator("svg.chart.lag rect.hover title").first).to_contain_text("lag")  # values on hover
    tasks = page.locator("#task-list tr", has_text=datasource)
    expect(tasks.first).to_contain_text("SUCCESS")
    errors = page.locator("#task-list details", has_text="unparseable").first
    errors.locator("summary").click()
    expect(errors.locator("pre.sample").first).to_contain_text("invalid JSON")
    recent = card.locator('[data-role="recent-tasks"] tr', has_text="SUCCESS").first  # from the supervisor's card
    expect(recent.locator('a[data-role="task-log"]')).to_be_visible()
    expect(recent.get_by_role("link", name="report")).to_be_visible()
    log_link = tasks.first.locator('a[data-role="task-log"]')  # a task's log is one click away
    task_log = page.request.get(urljoin(page.url, log_link.get_attribute("href")))
    assert task_log.ok and f"{log_link.inner_text()} SUCCESS: published" in task_log.text()
    segments = page.locator(f'.datasource[data-name="{datasource}"]')
    expect(segments.locator("tr")).to_have_count(3)  # the header and the sample's two hours
    expect(segments).to_contain_text("2 intervals")
    page.screenshot(path=ARTIFACTS / "console.png", full_page=True)

    page.evaluate("window.stillTheSamePage = true")
    more = make_sample_events(500, bad_every=0, seed=62)
    produce(stack.bootstrap_servers, live["topic"], more.records, 2)
    live["produced"].append(more)
    total = len(sample.records) + len(more.records)
    wait_until(lambda: committed_total(live["overlord"].engine, datasource) == total, "the second publish")
    expect(card).to_contain_text(f"processed {len(sample.records) - sample.bad + len(more.records):,}")
    assert page.evaluate("window.stillTheSamePage") is True  # updated without a reload


def test_the_datasource_card_sets_compaction_and_retention_and_drops_and_restores(page, live, prompt_answers):
    datasource, overlord = live["datasource"], live["overlord"]
    card = page.locator(f'.datasource[data-name="{datasource}"]')
    expect(card.locator('[data-role="compaction"]')).to_contain_text("default config: intervals settle PT1H")

    prompt_answers.append(json.dumps({"dataSource": datasource, "skipOffsetFromLatest": "P1D"}))
    card.get_by_role("button", name="Compaction config…").click()
    expect(card.locator('[data-role="compaction"]')).to_contain_text("own config: intervals settle P1D")
    prompt_answers.append(json.dumps([{"type": "dropBeforeByPeriod", "period": "P3650D"}]))
    card.get_by_role("button", name="Retention rules…").click()
    expect(card.locator('[data-role="rules"]')).to_contain_text("dropBeforeByPeriod P3650D")
    assert live["coordinator"].rules()[datasource][0].type == "dropBeforeByPeriod"

    card.locator('[data-role="drop-interval"]').first.click()  # the newest hour
    expect(card.locator("tr")).to_have_count(2)
    assert len({s.interval_start for s in visible_segments(overlord.engine, datasource)}) == 1
    card.get_by_role("button", name="Restore dropped").click()
    expect(card.locator("tr")).to_have_count(3)
    assert_exact(published_table(overlord.engine, datasource), merged(*live["produced"]))
    card.screenshot(path=ARTIFACTS / "datasource.png")

    prompt_answers.append("")  # emptied: back to the default config
    card.get_by_role("button", name="Compaction config…").click()
    expect(card.locator('[data-role="compaction"]')).to_contain_text("default config")


def test_the_task_list_filters_by_datasource_status_and_type_and_keeps_the_choice_across_polls(page, live):
    datasource = live["datasource"]
    page.select_option("#task-datasource", datasource)
    page.select_option("#task-status", "SUCCESS")
    rows = page.locator("#task-list tr")
    expect(rows.nth(1)).to_contain_text(datasource)
    page.wait_for_timeout(2_500)  # a poll redraws the list with the same filter
    assert page.locator("#task-datasource").input_value() == datasource
    for text in rows.all_inner_texts()[1:]:
        assert datasource in text and "SUCCESS" in text and "index_kafka" in text, text
    page.select_option("#task-type", "compact")
    page.select_option("#task-status", "RUNNING")
    expect(page.locator("#task-list")).to_have_text("none")  # nothing compacts this datasource now
    expect(page.locator("#task-older")).to_be_disabled()


def test_a_refused_spec_shows_each_error_at_its_field(page, live):
    bad = spec_json(f"ds_{uuid.uuid4().hex[:8]}", live["topic"], taskCount=-2)
    page.fill("#spec", json.dumps(bad, indent=2))
    page.click("#submit-spec")

    error = page.locator('#spec-errors li[data-path="spec.ioConfig.taskCount"]')
    expect(error).to_contain_text("must be >= 1")
    error.click()  # selects the field in the editor
    assert page.evaluate("(e => e.value.slice(e.selectionStart, e.selectionEnd))(document.getElementById('spec'))"
                         ) == '"taskCount"'
    page.locator("#submit").screenshot(path=ARTIFACTS / "spec-error.png")


def test_an_error_inside_a_list_selects_its_own_field_not_the_first_of_that_name(page, live):
    bad = spec_json(f"ds_{uuid.uuid4().hex[:8]}", live["topic"])
    bad["spec"]["dataSchema"]["metricsSpec"][3]["fieldName"] = 5  # the third "fieldName" in the text
    text = json.dumps(bad, indent=2)
    page.fill("#spec", text)
    page.click("#submit-spec")
    page.locator('#spec-errors li[data-path="spec.dataSchema.metricsSpec[3].fieldName"]').click()
    third = text.index('"fieldName"', text.index('"fieldName"', text.index('"fieldName"') + 1) + 1)
    assert page.evaluate("(e => [e.selectionStart, e.selectionEnd])(document.getElementById('spec'))") == [
        third, third + len('"fieldName"')]


def test_suspend_and_resume_change_the_state(page, live):
    datasource, overlord = live["datasource"], live["overlord"]
    card = page.locator(f'.supervisor[data-id="{datasource}"]')

    card.get_by_role("button", name="Suspend").click()
    expect(card.locator('[data-role="state"]')).to_have_text("SUSPENDED")
    assert overlord.get(datasource).suspended

    card.get_by_role("button", name="Resume").click()
    expect(card.locator('[data-role="state"]')).to_have_text("RUNNING")
    assert not overlord.get(datasource).suspended


def test_the_sql_box_shows_the_rows(page, live):
    datasource, expected = live["datasource"], merged(*live["produced"])
    page.fill("#sql-text", f'SELECT country, SUM("count") AS events FROM "{datasource}" '
                           "WHERE __time < TIMESTAMP '2026-11-01 02:00:00' GROUP BY country ORDER BY country")
    page.click("#run-sql")

    result = page.locator("#sql-result table")
    # the first query of a new query engine reads Parquet in a cold JVM: seconds, not milliseconds
    expect(result.locator("tr")).to_have_count(1 + len(expected.count_by_country), timeout=60_000)
    shown = {row[0]: int(row[1].replace(",", "")) for row in
             (r.split("\t") for r in result.locator("tr").all_inner_texts()[1:])}
    assert shown == dict(expected.count_by_country)
    expect(page.locator('[data-role="sql-timing"]')).to_contain_text(
        f"{len(expected.count_by_country)} rows in")  # and the engine that answered, e.g. "on duckdb"
    assert page.locator('[data-role="sql-timing"]').inner_text().rsplit(" on ", 1)[1] in ("duckdb", "spark")
    with page.expect_download() as download:
        page.click("#sql-csv")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == "country,events" and {tuple(line.split(",")) for line in lines[1:] if line} == {
        (country, str(n)) for country, n in expected.count_by_country.items()}
    page.locator("#sql").screenshot(path=ARTIFACTS / "sql.png")

    query = page.locator("#sql-text").input_value()
    page.click("#sql-explain")
    # EXPLAIN plans on Spark, which the DuckDB answer above never started: a cold JVM again
    expect(page.locator('#sql-result [data-role="spark-sql"]')).to_contain_text("GROUP BY", timeout=60_000)
    expect(page.locator("#sql-result table")).to_contain_text(datasource)

    page.reload()  # the history is kept in the browser
    page.locator("#sql-history summary").click()
    page.fill("#sql-text", "")
    page.locator('[data-role="history-query"]', has_text="GROUP BY country").first.click()
    assert page.locator("#sql-text").input_value() == query


def test_the_console_asks_for_credentials_and_a_reader_cannot_act(browser, secured, live):
    url, _app = secured
    anonymous = httpx.get(url)  # a browser then asks for a user and password
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
    context = browser.new_context(http_credentials={"username": READER[0], "password": READER[1]})
    reader = context.new_page()
    reader.on("dialog", lambda dialog: dialog.accept())
    assert reader.goto(url).status == 200
    expect(reader.locator("#supervisor-list")).to_contain_text("no supervisors")
    expect(reader.locator("#leader")).to_contain_text("your role: read")
    for action in ("#submit-spec", "#load-sample", 'nav a[href="#load"]'):  # nothing offered a reader cannot do
        expect(reader.locator(action)).to_be_hidden()
    status = reader.evaluate("""spec => fetch('/druid/indexer/v1/supervisor', {method: 'POST', body: spec,
        headers: {'Content-Type': 'application/json'}}).then(r => r.status)""",
                             json.dumps(spec_json("ds_reader", live["topic"])))
    assert status == 403  # and the API refuses it all the same
    context.close()


def test_an_avro_registry_topic_is_loaded_without_writing_json(page, live, stack, monkeypatch):
    """Avro values in Confluent's wire format: the loader decodes them through the registry, shows their fields,
    and the supervisor it submits indexes them exactly (the credentials typed in never shown again).
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.schema_registry import running_registry

    datasource, topic, overlord = f"ds_{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}", live["overlord"]
    create_topic(stack.bootstrap_servers, topic, 1)
    schema = {"type": "record", "name": "Sale", "fields": [{"name": "ts", "type": "long"},
                                                            {"name": "shop", "type": "string"},
                                                            {"name": "amount", "type": "long"}]}
    sales = [{"ts": 1_704_103_200_000 + i * 1_000, "shop": f"s{i % 3}", "amount": i} for i in range(30)]
    with running_registry("loader", "l0ader-pass") as registry:
        monkeypatch.setenv("OVERLORD_ALLOWED_SCHEMA_REGISTRIES", registry.url)
        serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url,
                                                         "basic.auth.user.info": "loader:l0ader-pass"}),
                                   json.dumps(schema))
        produce(stack.bootstrap_servers, topic,
                [serialize(sale, SerializationContext(topic, MessageField.VALUE)) for sale in sales], 1)

        page.fill("#load-topic", topic)
        page.select_option("#load-format", "avro")
        page.fill("#load-registry", registry.url)
        page.fill("#load-registry-auth", "loader:l0ader-pass")
        page.click("#load-sample")
        expect(page.locator("#load-raw")).to_contain_text(f"30 records sampled from {topic}")
        roles = {field: page.locator(f'#load-fields select[data-field="{field}"]').input_value()
                 for field in ("shop", "amount")}
        assert roles == {"shop": "dimension", "amount": "longSum"}
        page.select_option("#load-ts-format", "millis")
        page.fill("#load-datasource", datasource)
        page.click("#load-submit")
        expect(page.locator(f'.supervisor[data-id="{datasource}"] [data-role="state"]')).to_have_text("RUNNING")
        wait_until(lambda: committed_total(overlord.engine, datasource) == len(sales), "the loader's publish")
    totals: dict[str, int] = {}
    for row in published_table(overlord.engine, datasource).to_pylist():
        totals[row["shop"]] = totals.get(row["shop"], 0) + row["sum_amount"]
    assert totals == {f"s{k}": sum(i for i in range(30) if i % 3 == k) for k in range(3)}
    answer = httpx.get(urljoin(live["url"], f"/druid/indexer/v1/supervisor/{datasource}"))
    assert "l0ader-pass" not in answer.text and "<masked>" in answer.text
    overlord.terminate(datasource)


def test_a_topic_becomes_a_running_supervisor_through_the_loader_without_writing_json(page, live, stack):
    datasource, topic, overlord = f"ds_{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}", live["overlord"]
    create_topic(stack.bootstrap_servers, topic, 2)
    sample = make_sample_events(150, bad_every=100, seed=65)  # 151 records: the sampler reads them all
    produce(stack.bootstrap_servers, topic, sample.records, 2)

    page.fill("#load-topic", topic)
    page.click("#load-sample")
    expect(page.locator("#load-raw")).to_contain_text(f"{len(sample.records)} records sampled from {topic}")
    expect(page.locator("#load-ts")).to_have_value("ts")  # guessed from the field's name
    roles = {field: page.locator(f'#load-fields select[data-field="{field}"]').input_value()
             for field in ("country", "device", "value", "price")}
    assert roles == {"country": "dimension", "device": "dimension", "value": "longSum", "price": "doubleSum"}
    page.select_option('#load-fields select[data-field="device"]', "ignore")
    page.select_option("#load-query-gran", "hour")
    page.fill("#load-datasource", datasource)
    page.click("#load-preview")
    expect(page.locator('[data-role="preview-counts"]')).to_contain_text(
        f"{len(sample.records)} records read, 150 parsed, 1 unparseable")
    hours_and_countries = {(json.loads(r)["ts"][:13], json.loads(r)["country"]) for r in sample.records
                           if r.startswith(b'{"ts"') and r.endswith(b"}")}
    expect(page.locator('[data-role="preview-rows"] tr')).to_have_count(1 + len(hours_and_countries))
    page.locator("#load").screenshot(path=ARTIFACTS / "loader.png")

    page.click("#load-submit")
    card = page.locator(f'.supervisor[data-id="{datasource}"]')
    expect(card.locator('[data-role="state"]')).to_have_text("RUNNING")
    wait_until(lambda: committed_total(overlord.engine, datasource) == len(sample.records), "the loader's publish")
    counts: dict[str, int] = {}
    values: dict[str, int] = {}
    for row in published_table(overlord.engine, datasource).to_pylist():
        assert "device" not in row  # ignored, as chosen
        counts[row["country"]] = counts.get(row["country"], 0) + row["count"]
        values[row["country"]] = values.get(row["country"], 0) + row["sum_value"]
    assert counts == dict(sample.count_by_country) and values == dict(sample.value_by_country)

    spec = overlord.get(datasource).spec.to_druid_json()  # a second version, to compare with the first
    spec["spec"]["ioConfig"]["taskCount"] = 2
    overlord.submit(spec)
    card.get_by_role("button", name="Spec history").click()
    history = page.locator("#spec-history")
    history.locator('[data-role="diff-previous"]').click()
    expect(history.locator("pre.diff span.add")).to_contain_text('"taskCount": 2')
    expect(history.locator("pre.diff span.del")).to_contain_text('"taskCount": 1')
    overlord.terminate(datasource)


def test_a_re_created_topic_shows_its_stopped_partition_and_reads_the_new_topic_from_its_start(page, live, stack):
    from confluent_kafka.admin import AdminClient

    datasource, topic, overlord = f"ds_{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}", live["overlord"]
    create_topic(stack.bootstrap_servers, topic, 1)
    first, second = make_sample_events(50, bad_every=0, seed=63), make_sample_events(80, bad_every=0, seed=64)
    produce(stack.bootstrap_servers, topic, first.records, 1)
    overlord.submit(spec_json(datasource, topic, useEarliestOffset=True))
    wait_until(lambda: committed_total(overlord.engine, datasource) == 50, "the old topic's publish")
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=10)
    create_topic(stack.bootstrap_servers, topic, 1)
    produce(stack.bootstrap_servers, topic, second.records, 1)

    card = page.locator(f'.supervisor[data-id="{datasource}"]')
    stopped = card.locator("tr", has=page.locator('[data-role="read-from-earliest"]'))
    expect(stopped).to_contain_text("was re-created", timeout=30_000)
    assert committed_total(overlord.engine, datasource) == 50  # nothing of the new topic read as [50, 80)
    stopped.get_by_role("button", name="Read from its earliest offset (0)").click()
    wait_until(lambda: committed_total(overlord.engine, datasource) == 80, "the new topic read from offset 0")
    expect(stopped).to_have_count(0)
    overlord.terminate(datasource)
