"""The live page (`GET /`) in a real headless browser (Chromium, driven over the DevTools
protocol): it loads, draws the sessions of the running server from `/live/events`, and shows a
move while a long request outgrows its session.

Needs `chromium` (Debian's package; `.ci/run` installs it). Without it the test is skipped, unless
FLASHLANE_REQUIRE_BROWSER=1 (as in CI) makes that a failure."""

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request

import pytest
import websocket

from conftest import Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("FLASHLANE_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is required (FLASHLANE_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("chromium is not installed")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--remote-debugging-port=0", "--user-data-dir=" + os.path.abspath(".pytest-chromium"),
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    port = None
    deadline = time.time() + 60
    for line in proc.stderr:
        found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
        if found:
            port = int(found.group(1))
            break
        if time.time() > deadline:
            break
    if port is None:
        proc.kill()
        pytest.fail("chromium did not start its DevTools endpoint")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    yield port
    proc.kill()
    proc.wait(timeout=30)
    shutil.rmtree(".pytest-chromium", ignore_errors=True)


class Page:
    """One tab, evaluated over the DevTools protocol."""

    def __init__(self, port, url):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?{url}", method="PUT")
        with urllib.request.urlopen(request) as response:
            target = json.load(response)
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0

    def eval(self, expression):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": "Runtime.evaluate",
                                 "params": {"expression": expression, "returnByValue": True}}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                return message["result"]["result"].get("value")

    def wait_for(self, expression, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.25)
        return self.eval(expression)


@pytest.fixture(scope="module")
def small_sessions():
    s = Server("--context", "2048", "--slot-contexts", "256x3", "--slot-grow", "64", "--draft", "none")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_the_page_shows_the_sessions_and_a_move_as_it_happens(browser, small_sessions):
    page = Page(browser, small_sessions.url + "/")
    rows = page.wait_for("document.querySelectorAll('.session').length", 15)
    assert rows == 4, "the engine's session and three of 256"
    assert page.eval("document.getElementById('status').textContent").startswith("m ·")
    assert page.eval("document.querySelector('#session-1 .name').textContent") == "#1 · 288 tokens"
    # A reply that outgrows its 256-token session moves to the engine's while the page watches.
    client = small_sessions.client()
    reply = {}
    worker = threading.Thread(target=lambda: reply.update(r=client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Count from 1 to 300."}],
        max_tokens=700, temperature=0)))
    worker.start()
    moved = page.wait_for("[...document.querySelectorAll('#log li.move')].map(li => li.textContent).join('|')", 60)
    worker.join(timeout=120)
    assert "move" in moved, moved
    assert reply["r"].choices[0].finish_reason in ("stop", "length")
    assert int(page.wait_for("document.getElementById('moves').textContent", 5)) >= 1
