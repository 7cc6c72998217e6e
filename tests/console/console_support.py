"""Running the web console in a thread (uvicorn on a free port) and Debian's headless Chromium through Selenium.

The console is built exactly as ``tidelog console`` builds it (:func:`tidelog.console.app.build`), only
served from a thread of the test process so that tests need no subprocess plumbing. Chromium is driven
through the system chromedriver (``/usr/bin/chromedriver``): selenium-manager never downloads anything.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from tidelog.console.app import LOOPBACK_HOSTS, build

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).parent / "screenshots"


class ConsoleServer:
    """A console app served by uvicorn in a daemon thread; ``url`` is where it listens."""

    def __init__(
        self,
        bootstrap: str,
        *,
        allow_writes: bool,
        sample_interval: float = 0.3,
        config: dict[str, str] | None = None,
    ) -> None:
        """``config``: more librdkafka settings (SASL, TLS), as ``tidelog console -X`` takes them."""
        app = build(
            {"bootstrap.servers": bootstrap, "log_level": 3, **(config or {})},
            timeout=10.0,
            allow_writes=allow_writes,
            sample_interval=sample_interval,
            allowed_hosts=LOOPBACK_HOSTS,  # as `tidelog console` on 127.0.0.1
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="console-under-test", daemon=True)
        self.url = ""

    def start(self) -> ConsoleServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the console did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> ConsoleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpSession:
    """urllib with a cookie jar (the CSRF cookie), for what a browser cannot show: status codes, headers."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect())

    def request(
        self, path: str, form: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read().decode()

    def cookie(self, name: str) -> str:
        return next(c.value for c in self.jar if c.name == name and c.value is not None)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextmanager
def console_process(*args: str) -> Iterator[tuple[str, list[str]]]:
    """``tidelog console *args`` in a subprocess, once it listens: ``(its URL, its stderr lines so far)``.
    On leaving it is sent SIGTERM, and must exit by it (uvicorn shuts down gracefully, then re-raises the
    signal it caught, so the exit says SIGTERM)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tidelog", "console", *args], stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:
            lines.append(line)
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                break
        else:
            raise AssertionError("the console did not start:\n" + "".join(lines))
        yield found.group(1), lines
    finally:
        process.terminate()
        assert process.wait(timeout=30) == -signal.SIGTERM
        assert process.stderr is not None
        process.stderr.close()


def chromium_available() -> bool:
    return (
        os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER) and shutil.which(CHROMEDRIVER) is not None
    )


@contextmanager
def chromium(user_data_dir: Path) -> Iterator[Any]:
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must never download a driver or browser
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1100",
        f"--user-data-dir={user_data_dir}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def js_errors(driver: Any) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def visit(driver: Any, url: str, screenshot: str | None = None) -> None:
    driver.get(url)
    wait_for(lambda: driver.execute_script("return document.readyState") == "complete", what="page load")
    if screenshot:
        driver.save_screenshot(str(SCREENSHOTS / f"{screenshot}.png"))


def text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def texts(driver: Any, css: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [str(e.text) for e in driver.find_elements(By.CSS_SELECTOR, css)]
