"""The console's Security pages in a real headless Chromium, against a broker that requires SASL and has an
authorizer: one SASL_PLAINTEXT listener, ``authorizer.class.name=tidelog``, ``super.users=User:admin``, the
admin bootstrapped with ``tidelog users add --data-dir``. The consoles log in as admin with SCRAM-SHA-256.

- a user added through the users page (password in a password field) is listed with its mechanism and can
  log in with a confluent-kafka client; deleting it through its confirmation page removes it;
- an ACL created through the ACL page (after its confirmation page) is listed, found by the filter and in
  ``describe_acls``; deleting it through its confirmation page removes it;
- the read-only console lists users and ACLs but refuses to change either (403); a console whose user may
  not describe the cluster's ACLs says CLUSTER_AUTHORIZATION_FAILED rather than "no ACLs";
- the transactions page, whose wire client logs in with the console's SASL settings, shows an open
  transaction;
- ``tidelog console --command-config FILE`` takes a Java client properties file (``sasl.jaas.config``) and
  serves the users and transactions pages through it.

(Without an authorizer the ACL page says SECURITY_DISABLED: tests/console/test_console_browser.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from tests.console.console_support import (
    SCREENSHOTS,
    ConsoleServer,
    HttpSession,
    chromium,
    chromium_available,
    console_process,
    text,
    texts,
    visit,
    wait_for,
)
from tests.server.security.test_sasl_broker import ADMIN, ADMIN_PASSWORD, SASL_CONFIG, add_user_offline

from tidelog.testing import Broker

pytestmark = [
    pytest.mark.clients,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium and chromium-driver"),
]


def login(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("console-security")
    add_user_offline(base / "data", ADMIN, ADMIN_PASSWORD)
    add_user_offline(base / "data", "viewer", "viewer-secret")  # no ACL: may not describe the cluster's
    config = {**SASL_CONFIG, "authorizer.class.name": "tidelog", "super.users": f"User:{ADMIN}"}
    with Broker(config, data_dir=base / "data", run_dir=base / "run") as running:
        yield running


@pytest.fixture(scope="module")
def admin(broker: Broker) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": broker.bootstrap_servers, "log_level": 3, **login(ADMIN, ADMIN_PASSWORD)}
    )


@pytest.fixture(scope="module")
def console(broker: Broker) -> Iterator[ConsoleServer]:
    with ConsoleServer(
        broker.bootstrap_servers, allow_writes=True, config=login(ADMIN, ADMIN_PASSWORD)
    ) as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    SCREENSHOTS.mkdir(exist_ok=True)
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def fill(driver: Any, form_id: str, values: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    form = driver.find_element(By.ID, form_id)
    for name, value in values.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_visible_text(value)
        else:
            field.clear()
            field.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def confirm(driver: Any) -> None:
    from selenium.webdriver.common.by import By

    wait_for(lambda: driver.find_elements(By.ID, "confirm-button"), what="the confirmation page")
    driver.find_element(By.ID, "confirm-button").click()


def test_a_user_added_through_the_page_is_listed_and_can_log_in(
    browser: Any, console: ConsoleServer, broker: Broker
) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, console.url + "/users")
    assert texts(browser, "#users td.mono") == [ADMIN, "viewer"]
    assert browser.find_element(By.CSS_SELECTOR, "#add-user input[name=password]").get_attribute("type") == (
        "password"
    )
    fill(browser, "add-user", {"user": "carol", "mechanism": "SCRAM-SHA-512", "password": "carol-secret"})
    wait_for(lambda: browser.find_elements(By.ID, "users-done"), what="the user saved")
    browser.save_screenshot(str(SCREENSHOTS / "users.png"))
    assert texts(browser, "#users td.mono") == [ADMIN, "carol", "viewer"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#users tbody tr")
    assert rows[1].find_element(By.CSS_SELECTOR, ".chip").text == "SCRAM-SHA-512 (8192 iterations)"
    assert "carol-secret" not in browser.page_source

    carol = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "log_level": 3,
            **login("carol", "carol-secret", "SCRAM-SHA-512"),
        }
    )
    assert carol.list_topics(timeout=10).brokers  # logged in (no ACL: sees no topics, but is answered)

    rows[1].find_element(By.CSS_SELECTOR, "a.delete-user").click()
    wait_for(lambda: "Delete user carol?" in browser.page_source, what="the confirmation page")
    assert "SCRAM-SHA-512" in text(browser, ".confirm")
    confirm(browser)
    wait_for(lambda: browser.find_elements(By.ID, "users-done"), what="the user deleted")
    assert texts(browser, "#users td.mono") == [ADMIN, "viewer"]


def _carol_acls(admin: AdminClient) -> list[tuple[str, str, str, str, str]]:
    where = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        "User:carol",
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return sorted(
        (b.restype.name, b.name, b.resource_pattern_type.name, b.operation.name, b.permission_type.name)  # type: ignore[union-attr]
        for b in admin.describe_acls(where, request_timeout=10).result(10)
    )


def test_an_acl_created_through_the_page_is_listed_filtered_and_deleted(
    browser: Any, console: ConsoleServer, admin: AdminClient
) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, console.url + "/acls")
    assert texts(browser, "#acls tbody td") == ["No ACLs match."]
    fill(
        browser,
        "create-acl",
        {
            "principal": "User:carol",
            "resource_type": "TOPIC",
            "name": "orders-",
            "pattern_type": "PREFIXED",
            "operation": "READ",
            "permission": "ALLOW",
        },
    )
    wait_for(lambda: "Create this ACL?" in browser.page_source, what="the confirmation page")
    browser.save_screenshot(str(SCREENSHOTS / "confirm-acl.png"))
    assert text(browser, ".confirm p") == "ALLOW User:carol from host * to READ TOPIC 'orders-' (PREFIXED)"
    assert _carol_acls(admin) == []  # the confirmation page changed nothing
    confirm(browser)
    wait_for(lambda: browser.find_elements(By.ID, "acls-done"), what="the ACL created")
    assert _carol_acls(admin) == [("TOPIC", "orders-", "PREFIXED", "READ", "ALLOW")]
    assert texts(browser, "#acls tbody tr")[0].split() == [
        "User:carol", "*", "TOPIC", "orders-", "PREFIXED", "READ", "ALLOW", "delete…"
    ]  # fmt: skip

    # the filter: by principal and pattern type finds it, by another resource type does not
    visit(browser, console.url + "/acls?principal=User%3Acarol&pattern_type=PREFIXED", screenshot="acls")
    assert [row.split()[0] for row in texts(browser, "#acls tbody tr")] == ["User:carol"]
    visit(browser, console.url + "/acls?principal=User%3Acarol&resource_type=GROUP")
    assert texts(browser, "#acls tbody td") == ["No ACLs match."]

    visit(browser, console.url + "/acls?principal=User%3Acarol")
    browser.find_element(By.CSS_SELECTOR, "#acls a.delete-acl").click()
    wait_for(lambda: "Delete this ACL?" in browser.page_source, what="the confirmation page")
    confirm(browser)
    wait_for(lambda: browser.find_elements(By.ID, "acls-done"), what="the ACL deleted")
    assert text(browser, "#acls-done") == "Done: deleted 1."
    assert _carol_acls(admin) == []


def test_read_only_console_lists_but_refuses_user_and_acl_writes(broker: Broker, admin: AdminClient) -> None:
    server = ConsoleServer(
        broker.bootstrap_servers, allow_writes=False, config=login(ADMIN, ADMIN_PASSWORD)
    ).start()
    try:
        http = HttpSession(server.url)
        status, _, body = http.request("/users")
        assert status == 200
        assert ">admin<" in body
        token = http.cookie("tidelog_console_csrf")
        acl = {
            "principal": "User:mallory",
            "host": "*",
            "resource_type": "CLUSTER",
            "name": "kafka-cluster",
            "pattern_type": "LITERAL",
            "operation": "ALL",
            "permission": "ALLOW",
        }
        writes = {
            "/users": {
                "user": "mallory",
                "mechanism": "SCRAM-SHA-256",
                "password": "x",
                "iterations": "8192",
            },
            "/users/admin/delete": {},
            "/acls/new": acl,
            "/acls/delete": acl,
        }
        for path, form in writes.items():
            status, _, body = http.request(path, {**form, "csrf_token": token})
            assert (path, status, "Read-only console" in body) == (path, 403, True)
        status, _, body = http.request("/acls")
        assert status == 200
        assert "No ACLs match." in body
    finally:
        server.stop()
    viewer = ConsoleServer(
        broker.bootstrap_servers, allow_writes=False, config=login("viewer", "viewer-secret")
    ).start()
    try:
        status, _, body = HttpSession(viewer.url).request("/acls")
        assert (status, "DescribeAcls: CLUSTER_AUTHORIZATION_FAILED" in body) == (502, True)
    finally:
        viewer.stop()
    described = admin.describe_user_scram_credentials(request_timeout=10).result(10)  # type: ignore[union-attr]
    assert sorted(described) == [ADMIN, "viewer"]


def test_transactions_page_logs_in_over_sasl(browser: Any, console: ConsoleServer, broker: Broker) -> None:
    admin_login = login(ADMIN, ADMIN_PASSWORD)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "transactional.id": "tx-over-sasl",
            "log_level": 3,
            **admin_login,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("sasl-orders", key=b"k", value=b"v")
    producer.flush(30)
    try:
        visit(browser, console.url + "/transactions?hanging_after=3600", screenshot="transactions-sasl")
        assert texts(browser, "#transactions td.mono") == ["tx-over-sasl"]
        assert texts(browser, "#transactions .chip") == ["sasl-orders/0"]
    finally:
        producer.abort_transaction(30)


def test_tidelog_console_takes_a_command_config_file(broker: Broker, tmp_path: Path) -> None:
    import urllib.request

    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{ADMIN_PASSWORD}";\n'
    )
    with console_process(
        *("-b", broker.bootstrap_servers, "--command-config", str(config), "--listen", "127.0.0.1:0")
    ) as (url, _):
        for path, expected in (
            ("/users", f'<td class="mono">{ADMIN}</td>'),
            ("/transactions", "No open transactions."),
        ):
            with urllib.request.urlopen(url + path, timeout=30) as response:
                assert (path, response.status, expected in response.read().decode()) == (path, 200, True)
