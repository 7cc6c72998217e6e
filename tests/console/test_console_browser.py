"""The web console in a real headless Chromium against a real tidelog broker with data.

One broker, two consoles (read-write and read-only) and one browser for the module:
- every page loads (200, its key content, no error in the browser's console log) and is screenshotted into
  tests/console/screenshots/;
- the message browser finds a produced message by key, and a message produced through its form;
- untrusted contents (``<script>``, ``<img onerror>``, HTML in keys, values, headers, JSON) are shown as
  text: no dialog opens, no element is created from them, no handler runs;
- the lag chart's data (what the chart plots, from its canvas) falls 300, 200, 100, 0 as a consumer commits;
- a reset-offsets dry run shows the new offsets and changes nothing; executing it changes the committed
  offsets (read back with an AdminClient);
- create / alter config / delete topic go through a confirmation page;
- an open transaction is listed (its id escaped), marked hanging once open longer than the threshold, and
  gone once aborted;
- a share group is listed, and its page shows its member and assignment, its share-partition's start
  offset, log end and backlog, and exactly the records its member holds; after the member leaves, none;
- only loopback Host names are served (a DNS-rebinding page cannot read the console);
- the read-only console refuses every write with 403 and says why; a write without the CSRF token is
  refused even with --allow-writes; the JSON-lines download is an ASCII attachment.
"""

from __future__ import annotations

import itertools
import json
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from tests.console.console_support import (
    SCREENSHOTS,
    ConsoleServer,
    HttpSession,
    chromium,
    chromium_available,
    console_process,
    js_errors,
    text,
    texts,
    visit,
    wait_for,
)
from tests.support.dead_letters import set_group_configs

from tidelog.testing import Broker

pytestmark = [
    pytest.mark.clients,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium and chromium-driver"),
]

XSS_KEY = "<script>window.__xss = 'key'; alert('key')</script>"
XSS_VALUE = "<img src=x onerror=\"window.__xss='value'; alert('value')\"><b>bold?</b>"
XSS_JSON = json.dumps({"html": "<script>alert('json')</script>", "n": 1})
XSS_HEADER = "<iframe src=javascript:alert('header')></iframe>"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("console")
    with Broker({"num.partitions": 1}, data_dir=base / "data", run_dir=base / "run") as running:
        yield running


@pytest.fixture(scope="module")
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(broker: Broker, topic: str, records: list[dict[str, Any]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 3})
    for record in records:
        producer.produce(topic, **record)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def data(broker: Broker, admin: AdminClient) -> dict[str, str]:
    create_topic(admin, "orders", 3)
    produce(
        broker,
        "orders",
        [
            {
                "key": f"order-{i}".encode(),
                "value": json.dumps({"id": i, "item": "tea"}).encode(),
                "partition": i % 3,
            }
            for i in range(200)
        ],
    )
    create_topic(admin, "untrusted", 1)
    produce(
        broker,
        "untrusted",
        [
            {"key": XSS_KEY.encode(), "value": XSS_VALUE.encode(), "headers": [("h", XSS_HEADER.encode())]},
            {"key": b"json", "value": XSS_JSON.encode()},
        ],
    )
    create_topic(admin, "lagging", 3)
    produce(broker, "lagging", [{"value": b"m%d" % i, "partition": i % 3} for i in range(300)])
    return {"orders": "orders", "untrusted": "untrusted", "lagging": "lagging"}


@pytest.fixture(scope="module")
def console(broker: Broker, data: dict[str, str]) -> Iterator[ConsoleServer]:
    with ConsoleServer(broker.bootstrap_servers, allow_writes=True) as server:
        yield server


@pytest.fixture(scope="module")
def readonly_console(broker: Broker, data: dict[str, str]) -> Iterator[ConsoleServer]:
    with ConsoleServer(broker.bootstrap_servers, allow_writes=False) as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    SCREENSHOTS.mkdir(exist_ok=True)
    print(f"\nconsole screenshots: {SCREENSHOTS}", file=sys.stderr)
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def chart_points(driver: Any, canvas_id: str) -> list[float] | None:
    raw = driver.execute_script(f"return document.getElementById('{canvas_id}').dataset.points")
    return None if raw is None else list(json.loads(raw))


def test_every_page_loads_with_its_content_and_no_js_error(browser: Any, console: ConsoleServer) -> None:
    http = HttpSession(console.url)
    pages = {
        "overview": ("/", "#brokers", "127.0.0.1"),
        "topics": ("/topics", "#topics", "orders"),
        "topic": ("/topics/orders", "#topic-messages", "200"),
        "messages": ("/topics/orders/messages", "#messages", "order-199"),
        "groups": ("/groups", "#groups", ""),
        "transactions": ("/transactions", "#transactions", "No open transactions."),
        "share-groups": ("/share-groups", "#share-groups", ""),
        "users": ("/users", "#users", "No SCRAM users."),
        "acls-disabled": ("/acls", "#acls-disabled", "SECURITY_DISABLED"),
    }
    for name, (path, css, expected) in pages.items():
        status, headers, _ = http.request(path)
        assert status == 200, path
        assert "script-src 'self'" in headers["content-security-policy"]
        visit(browser, console.url + path, screenshot=name)
        assert expected in text(browser, css), path
        assert js_errors(browser) == [], path
    # the overview's throughput chart was drawn from its endpoint (a list, empty until two samples exist)
    visit(browser, console.url + "/")
    wait_for(lambda: chart_points(browser, "throughput-chart") is not None, what="the throughput chart")
    assert text(browser, "#under-replicated") == "0"
    assert text(browser, "#offline") == "0"


def test_message_browser_finds_a_message_by_key(browser: Any, console: ConsoleServer) -> None:
    visit(browser, console.url + "/topics/orders/messages?key=order-137&mode=latest&limit=10")
    assert texts(browser, "#messages pre.key") == ["order-137"]
    assert json.loads(text(browser, "#messages pre.value")) == {"id": 137, "item": "tea"}
    # from an offset in one partition: order-137 is offset 45 of partition 2 (i % 3 == 2, i // 3 == 45)
    visit(
        browser, console.url + "/topics/orders/messages?partition=2&mode=offset&offset=45&limit=2&format=hex"
    )
    assert texts(browser, "#messages pre.key") == ["6f 72 64 65 72 2d 31 33 37", "6f 72 64 65 72 2d 31 34 30"]
    assert js_errors(browser) == []


def test_produce_form_then_found(browser: Any, console: ConsoleServer) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, console.url + "/topics/orders/messages")
    form = browser.find_element(By.ID, "produce-form")
    form.find_element(By.NAME, "partition").send_keys("1")
    form.find_element(By.NAME, "key").send_keys("from-the-form")
    form.find_element(By.NAME, "value").send_keys('{"hello": "console"}')
    form.find_element(By.NAME, "headers").send_keys("source=browser")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: browser.find_elements(By.ID, "produced"), what="produced note")
    assert text(browser, "#produced") == "Produced at partition/offset 1/67."
    assert texts(browser, "#messages pre.key") == ["from-the-form"]
    assert texts(browser, "#messages .header") == ["source: browser"]


def test_untrusted_contents_are_inert(browser: Any, console: ConsoleServer) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    visit(browser, console.url + "/topics/untrusted/messages?mode=offset&offset=0", screenshot="untrusted")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is the check
    assert browser.execute_script("return window.__xss") is None
    table = browser.find_element(By.ID, "messages")
    for tag in ("script", "img", "b", "iframe"):
        assert table.find_elements(By.TAG_NAME, tag) == [], tag
    assert texts(browser, "#messages pre.key") == [XSS_KEY, "json"]
    values = texts(browser, "#messages pre.value")
    assert values[0] == XSS_VALUE
    assert json.loads(values[1]) == json.loads(XSS_JSON)  # pretty-printed, still text
    assert texts(browser, "#messages .header") == [f"h: {XSS_HEADER}"]
    # the download is an attachment of ASCII JSON lines, the bytes intact
    status, headers, body = HttpSession(console.url).request(
        "/topics/untrusted/messages.jsonl?mode=offset&offset=0"
    )
    assert status == 200
    assert headers["content-type"] == "application/x-ndjson"
    assert headers["content-disposition"] == 'attachment; filename="untrusted.jsonl"'
    assert headers["x-content-type-options"] == "nosniff"
    assert body.isascii()
    lines = [json.loads(line) for line in body.splitlines()]
    assert [(r["key"], r["value"], r["headers"]) for r in lines] == [
        (XSS_KEY, XSS_VALUE, [["h", XSS_HEADER]]),
        ("json", XSS_JSON, []),
    ]
    assert js_errors(browser) == []


def test_lag_chart_falls_to_zero_as_a_consumer_catches_up(
    browser: Any, console: ConsoleServer, broker: Broker, admin: AdminClient
) -> None:
    group = "lag-watchers"
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    partitions = [confluent_kafka.TopicPartition("lagging", p, 0) for p in range(3)]
    try:
        consumer.commit(offsets=partitions, asynchronous=False)
        consumer.assign(partitions)
        visit(browser, console.url + "/group?id=" + group)
        wait_for(
            lambda: (chart_points(browser, "lag-chart") or [None])[-1] == 300, what="lag 300 on the chart"
        )
        consumed = 0
        for expected in (200, 100, 0):
            while consumed < 300 - expected:
                batch = consumer.consume(num_messages=300 - expected - consumed, timeout=5)
                consumed += sum(1 for m in batch if m.error() is None)
            consumer.commit(asynchronous=False)
            wait_for(
                lambda expected=expected: (chart_points(browser, "lag-chart") or [None])[-1] == expected,
                what=f"lag {expected} on the chart",
            )
        browser.save_screenshot(str(SCREENSHOTS / "group-lag.png"))
    finally:
        consumer.close()
    points = chart_points(browser, "lag-chart")
    assert points is not None
    assert points[0] == 300
    assert points[-1] == 0
    assert all(a >= b for a, b in itertools.pairwise(points)), points
    assert {300, 200, 100, 0} <= set(points)
    assert js_errors(browser) == []


def committed(admin: AdminClient, group: str) -> dict[int, int]:
    request = [confluent_kafka.ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request)[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == "lagging"}


def test_reset_offsets_dry_run_then_execute(browser: Any, console: ConsoleServer, admin: AdminClient) -> None:
    from selenium.webdriver.common.by import By

    group = "reset-me"
    admin.alter_consumer_group_offsets(
        [
            confluent_kafka.ConsumerGroupTopicPartitions(
                group, [confluent_kafka.TopicPartition("lagging", p, 100) for p in range(3)]
            )
        ]
    )[group].result(30)
    visit(browser, console.url + "/group?id=" + group)
    form = browser.find_element(By.ID, "reset-form")
    form.find_element(By.CSS_SELECTOR, "select[name=strategy] option[value=shift-by]").click()
    form.find_element(By.NAME, "amount").send_keys("-30")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: browser.find_elements(By.ID, "reset-preview"), what="the dry run")
    browser.save_screenshot(str(SCREENSHOTS / "group-reset-preview.png"))
    assert texts(browser, "#reset-plan td.new-offset") == ["70", "70", "70"]
    assert committed(admin, group) == {0: 100, 1: 100, 2: 100}  # a dry run changes nothing
    browser.find_element(By.ID, "execute-reset").click()
    wait_for(lambda: browser.find_elements(By.ID, "reset-done"), what="the reset")
    assert committed(admin, group) == {0: 70, 1: 70, 2: 70}
    assert texts(browser, "#offsets td:nth-child(3)") == ["70", "70", "70"]
    assert js_errors(browser) == []


def test_topic_create_alter_delete_with_confirmation(
    browser: Any, console: ConsoleServer, admin: AdminClient
) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, console.url + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("made-in-browser")
    partitions = form.find_element(By.NAME, "partitions")
    partitions.clear()
    partitions.send_keys("2")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: browser.find_elements(By.ID, "confirm-button"), what="the confirmation")
    assert "made-in-browser" not in admin.list_topics(timeout=10).topics  # confirming is a separate step
    browser.find_element(By.ID, "confirm-button").click()
    wait_for(lambda: "Done: created" in browser.page_source, what="the topic page")
    assert len(admin.list_topics(timeout=10).topics["made-in-browser"].partitions) == 2

    form = browser.find_element(By.ID, "alter-config")
    form.find_element(By.NAME, "key").send_keys("retention.ms")
    form.find_element(By.NAME, "value").send_keys("3600000")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: browser.find_elements(By.ID, "confirm-button"), what="the confirmation")
    browser.save_screenshot(str(SCREENSHOTS / "confirm-config.png"))
    browser.find_element(By.ID, "confirm-button").click()
    wait_for(lambda: "Done: config" in browser.page_source, what="the topic page")
    resource = ConfigResource(ResourceType.TOPIC, "made-in-browser")
    assert admin.describe_configs([resource])[resource].result(30)["retention.ms"].value == "3600000"

    browser.find_element(By.LINK_TEXT, "Delete topic…").click()
    wait_for(lambda: browser.find_elements(By.NAME, "confirm_name"), what="the confirmation")
    browser.find_element(By.NAME, "confirm_name").send_keys("made-in-browser")
    browser.find_element(By.ID, "confirm-button").click()
    wait_for(lambda: "/topics?done=deleted" in browser.current_url, what="the topic list")
    wait_for(lambda: "made-in-browser" not in admin.list_topics(timeout=10).topics, what="the deletion")
    assert js_errors(browser) == []


def test_read_only_console_refuses_writes(
    browser: Any, readonly_console: ConsoleServer, console: ConsoleServer, admin: AdminClient
) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, readonly_console.url + "/topics/new?name=not-made&partitions=1&replication=1")
    browser.find_element(By.ID, "confirm-button").click()
    wait_for(lambda: "Read-only console" in browser.page_source, what="the refusal")
    browser.save_screenshot(str(SCREENSHOTS / "refused.png"))
    assert "--allow-writes" in text(browser, "#message-detail")
    # the browser logs the refused POST's status, and nothing else
    assert [m.split(" - ", 1)[1] for m in js_errors(browser)] == [
        "Failed to load resource: the server responded with a status of 403 (Forbidden)"
    ]
    assert "not-made" not in admin.list_topics(timeout=10).topics

    http = HttpSession(readonly_console.url)
    http.request("/")
    token = http.cookie("tidelog_console_csrf")
    writes = {
        "/topics/new": {"name": "not-made", "partitions": "1", "replication": "1"},
        "/topics/orders/delete": {"confirm_name": "orders"},
        "/topics/orders/config": {"key": "retention.ms", "value": "1", "reset": "0"},
        "/topics/orders/produce": {"key": "k", "value": "v"},
        "/group/reset": {"id": "reset-me", "strategy": "earliest"},
    }
    for path, form in writes.items():
        status, _, body = http.request(path, {**form, "csrf_token": token})
        assert status == 403, path
        assert "Read-only console" in body
    assert "not-made" not in admin.list_topics(timeout=10).topics
    assert committed(admin, "reset-me") == {0: 70, 1: 70, 2: 70}

    # with --allow-writes, a form without this session's CSRF token is refused all the same
    writer = HttpSession(console.url)
    writer.request("/")
    status, _, body = writer.request(
        "/topics/new", {"name": "not-made", "partitions": "1", "replication": "1"}
    )
    assert (status, "Form expired" in body) == (403, True)
    status, _, _ = writer.request(
        "/topics/new", {"name": "not-made", "partitions": "1", "replication": "1", "csrf_token": "forged"}
    )
    assert status == 403
    assert "not-made" not in admin.list_topics(timeout=10).topics


def test_transactions_open_and_hanging(browser: Any, console: ConsoleServer, broker: Broker) -> None:
    transactional_id = "<b>tx</b>-console"
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": transactional_id, "log_level": 3}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("orders", key=b"in-a-transaction", value=b"v", partition=0)
    assert producer.flush(30) == 0
    try:
        visit(browser, console.url + "/transactions?hanging_after=3600")
        assert (text(browser, "#open-count"), text(browser, "#hanging-count")) == ("1", "0")
        assert texts(browser, "#transactions td.mono") == [transactional_id]
        assert texts(browser, "#transactions .chip") == ["orders/0"]
        visit(browser, console.url + "/transactions?hanging_after=0", screenshot="transactions-hanging")
        assert text(browser, "#hanging-count") == "1"
        assert texts(browser, "#transactions td.mono") == [f"{transactional_id} hanging"]
    finally:
        producer.abort_transaction(30)
    visit(browser, console.url + "/transactions?hanging_after=0")
    assert text(browser, "#open-count") == "0"
    assert js_errors(browser) == []


def test_share_group_page_shows_members_offsets_and_held_records(
    browser: Any, console: ConsoleServer, broker: Broker, admin: AdminClient
) -> None:
    create_topic(admin, "queue", 1)
    produce(broker, "queue", [{"value": b"job-%d" % i} for i in range(10)])
    group = "<i>workers</i>"
    set_group_configs(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest"})
    consumer = confluent_kafka.ShareConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "log_level": 3,
        }
    )
    consumer.subscribe(["queue"])
    try:
        got: list[confluent_kafka.Message] = []

        def acquired() -> bool:
            got.extend(m for m in consumer.poll(0.5) if m.error() is None)
            return len(got) >= 4

        wait_for(acquired, what="records for the share consumer")
        assert [m.offset() for m in got] == list(range(len(got)))
        for message in got[:3]:
            consumer.acknowledge(message, confluent_kafka.AcknowledgeType.ACCEPT)
        consumer.commit_sync()
        visit(browser, console.url + "/share-groups")
        assert group in texts(browser, "#share-groups a")
        visit(browser, f"{console.url}/share-group?id={urllib.parse.quote(group)}", screenshot="share-group")
        assert text(browser, "#share-group-id") == group
        assert text(browser, "#member-count") == "1"
        assert texts(browser, "#share-members .chip") == ["queue/0"]
        held = len(got) - 3
        # topic, partition, start offset, log end, backlog, held
        assert texts(browser, "#share-partitions td") == ["queue", "0", "3", "10", "7", str(held)]
        assert text(browser, "#held-count") == str(held)
        offsets = texts(browser, "#share-pending td.mono")[0]
        assert offsets == ("3" if held == 1 else f"3-{len(got) - 1}")
    finally:
        consumer.close()

    def released() -> bool:
        visit(browser, f"{console.url}/share-group?id={urllib.parse.quote(group)}")
        return (text(browser, "#member-count"), text(browser, "#held-count")) == ("0", "0")

    wait_for(released, what="the member gone and its records released")
    assert texts(browser, "#share-pending td") == ["No records held."]
    assert js_errors(browser) == []


def test_tidelog_console_command_serves_with_client_properties(broker: Broker) -> None:
    """The command as a user runs it: port 0 picks a port, SIGTERM stops it, -X properties reach librdkafka."""
    import subprocess
    import urllib.request

    with console_process(
        "-b", broker.bootstrap_servers, "-X", "client.id=console-under-test", "--listen", "127.0.0.1:0"
    ) as (url, lines):
        assert lines[0].strip() == f"tidelog console (read-only) for {broker.bootstrap_servers}"
        with urllib.request.urlopen(url + "/", timeout=30) as response:
            body = response.read().decode()
        assert response.status == 200
        assert 'id="cluster-id"' in body
        assert '<span class="badge">read-only</span>' in body

    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog",
            "console",
            "-b",
            broker.bootstrap_servers,
            "-X",
            "no.such.property=1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1] == 'Error: No such configuration property: "no.such.property"'


def test_only_loopback_host_names_are_served(console: ConsoleServer) -> None:
    http = HttpSession(console.url)
    port = console.url.rsplit(":", 1)[1]
    assert http.request("/topics", headers={"Host": f"localhost:{port}"})[0] == 200
    status, _, body = http.request("/topics", headers={"Host": f"rebound.example:{port}"})
    assert (status, body) == (400, "Invalid host header")


def test_missing_topic_is_a_404_page(console: ConsoleServer) -> None:
    http = HttpSession(console.url)
    for path in (
        "/topics/no-such-topic",
        "/topics/no-such-topic/messages",
        "/topics/orders/messages?partition=9",
    ):
        status, _, body = http.request(path)
        assert status == 404, path
        assert "<h1>Not found</h1>" in body


def test_reset_preview_strategies(console: ConsoleServer, admin: AdminClient) -> None:
    """Each strategy's dry run, clamped into [log start, high watermark] as kafka-consumer-groups does."""
    import re

    group = "preview-only"
    admin.alter_consumer_group_offsets(
        [
            confluent_kafka.ConsumerGroupTopicPartitions(
                group, [confluent_kafka.TopicPartition("lagging", p, 40) for p in range(3)]
            )
        ]
    )[group].result(30)
    http = HttpSession(console.url)
    expected = {
        "strategy=earliest": ["0", "0", "0"],
        "strategy=latest": ["100", "100", "100"],
        "strategy=to-offset&amount=500": ["100", "100", "100"],
        "strategy=to-offset&amount=7": ["7", "7", "7"],
        "strategy=shift-by&amount=-50": ["0", "0", "0"],
        "strategy=shift-by&amount=5&topic=lagging": ["45", "45", "45"],
        "strategy=to-datetime&datetime=2000-01-01T00:00:00Z": ["0", "0", "0"],
        "strategy=to-datetime&datetime=2100-01-01T00:00:00Z": ["100", "100", "100"],
    }
    for query, offsets in expected.items():
        status, _, body = http.request(f"/group/reset?id={group}&{query}")
        assert status == 200, query
        assert re.findall(r'<td class="n new-offset">(\d+)</td>', body) == offsets, query
    assert committed(admin, group) == {0: 40, 1: 40, 2: 40}  # previews change nothing
    status, _, body = http.request(f"/group/reset?id={group}&strategy=to-offset&amount=x")
    assert (status, "to-offset needs a whole number" in body) == (400, True)
