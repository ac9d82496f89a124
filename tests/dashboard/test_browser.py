"""The dashboard in a real browser (Debian's headless Chromium through Selenium) over
real runs of the local target: a request without the token is refused, the pages load,
a filter works, a running run's log arrives live, and the run is stopped from its page
and recorded ``cancelled``.

Skipped on a machine without chromium and chromium-driver (``bash tests/harness/
browser.sh`` installs them) unless ``NODUS_REQUIRE_DOCKER=1`` (CI), where it fails.
With ``NODUS_DASHBOARD_SCREENSHOTS=FOLDER`` it saves the pages it visits there (the
screenshots in docs/ are made so).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from docker_support import IMAGE, docker_client, engine_clean, own_client  # noqa: F401

from nodus_cli.api import Client, RunStatus
from nodus_cli.dashboard import address, create_app, new_token
from nodus_cli.dashboard.server import bind

pytestmark = [pytest.mark.docker, pytest.mark.browser]

#: Read before the test: its client clears every NODUS_ variable.
SHOTS = os.environ.get("NODUS_DASHBOARD_SCREENSHOTS")
TICKS = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.3; done"


def _browser() -> Any:
    missing = [b for b in ("chromium", "chromedriver") if shutil.which(b) is None]
    if missing:
        words = f"{' and '.join(missing)} missing: bash tests/harness/browser.sh installs them"
        if os.environ.get("NODUS_REQUIRE_DOCKER") == "1":
            pytest.fail(words)
        pytest.skip(words)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


@pytest.fixture
def client(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    docker_client: Any,  # noqa: F811  (the engine answers, or the test fails or skips)
) -> Iterator[Client]:
    with own_client(tmp_path, monkeypatch, NODUS_FAKE_GPUS="l4x1") as c:
        yield c


@pytest.fixture
def served(client: Client) -> Iterator[str]:
    import uvicorn

    sock = bind("127.0.0.1", 0)
    token = new_token()
    app = create_app(token, client.home_folder)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield address("127.0.0.1", sock.getsockname()[1], token)
    server.should_exit = True
    thread.join(10)


def _until(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_the_dashboard_in_a_browser(client: Client, served: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    shots = SHOTS
    done = client.run(image=IMAGE, command=["echo", "done"], name="quick")
    done.wait(timeout=60)
    running = client.run(image=IMAGE, command=["sh", "-c", TICKS], name="ticker", gpu="L4")
    assert _until(lambda: running.status == RunStatus.RUNNING, 60), running.status
    waiting = client.run(image=IMAGE, command=["true"], name="waiter", gpu="L4", priority=5)
    assert _until(lambda: waiting.status == RunStatus.QUEUED, 60), waiting.status
    base = served.split("/?token=")[0]
    browser = _browser()
    try:

        def shot(name: str) -> None:
            if shots:
                browser.save_screenshot(str(Path(shots) / f"dashboard-{name}.png"))

        browser.get(base + "/runs")  # no token: refused, with words
        assert "needs its access token" in browser.find_element(By.TAG_NAME, "body").text

        browser.get(served)  # the address printed: a cookie, then the GPUs page
        assert browser.current_url == base + "/"
        assert "GPUs and the queue" in browser.title
        local = browser.find_element(By.ID, "target-local").text
        assert "L4" in local and running.id in local  # who holds the GPU
        queue = browser.find_element(By.CSS_SELECTOR, "table.queue").text
        assert waiting.id in queue and "1st in line" in queue
        shot("gpus")
        bearer = {"Authorization": f"Bearer {served.split('?token=')[1]}"}
        gpus = httpx.get(base + "/api/gpus", headers=bearer, timeout=30).json()
        (node,) = next(t for t in gpus["targets"] if t["target"] == "local")["nodes"]
        assert [h["run"] for h in node["holders"]] == [running.id]
        (entry,) = gpus["queue"]
        assert (entry["run"], entry["priority"], entry["target"]) == (waiting.id, 5, "local")
        assert "1st in line" in entry["reason"] and running.id in entry["reason"]

        browser.get(base + "/runs")
        table = browser.find_element(By.CSS_SELECTOR, "table.runs").text
        assert running.id in table and done.id in table
        shot("runs")
        Select(browser.find_element(By.ID, "filter-status")).select_by_visible_text("running")
        browser.find_element(By.ID, "filter-apply").click()
        assert _until(lambda: "status=running" in browser.current_url)
        table = browser.find_element(By.CSS_SELECTOR, "table.runs").text
        assert running.id in table and done.id not in table

        browser.find_element(By.LINK_TEXT, running.id).click()
        log = browser.find_element(By.ID, "log")
        assert _until(lambda: "tick" in log.text), "no log line arrived"
        first = log.text.count("tick")
        assert _until(lambda: log.text.count("tick") >= first + 3, 5), "the log is not live"
        shot("run")

        browser.find_element(By.ID, "stop").click()
        assert _until(lambda: "Stop" in browser.title, 60)
        assert running.wait(timeout=60).status == RunStatus.CANCELLED
        waiting.wait(timeout=60)  # the GPU is free: the queued run runs and ends

        if shots:
            browser.get(base + "/spend")
            shot("spend")
            browser.get(base + "/plan")
            browser.find_element(By.ID, "plan-text").send_keys(
                f'name = "embed"\nimage = "{IMAGE}"\ncommand = "true"\ngpu = "L4"\n'
            )
            Select(browser.find_element(By.NAME, "target")).select_by_visible_text("catalog")
            browser.find_element(By.ID, "plan-submit").click()
            _until(lambda: "feasible" in browser.page_source)
            shot("plan")
    finally:
        browser.quit()
        for run in (running, waiting):
            if run.status.active:
                run.stop()
