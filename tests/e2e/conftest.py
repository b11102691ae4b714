"""Starts the real `flashlane serve` binary on 127.0.0.1 with an ephemeral port.

The binary comes from $FLASHLANE_BIN (scripts/test builds it in release mode); the model is the
embedded default unless $FLASHLANE_TEST_MODEL names another directory.
"""

import os
import re
import signal
import subprocess
import threading
import time

import openai
import pytest

BIN = os.environ.get("FLASHLANE_BIN", "target/release/flashlane")
START_TIMEOUT_S = 120


class Server:
    def __init__(self, *args):
        # The tests name the model "m", as a client configured for this server would.
        cmd = [BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--load-limit-gb", "4",
               "--served-model-name", "m", *args]
        model = os.environ.get("FLASHLANE_TEST_MODEL")
        if model:
            cmd += ["--model", model]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log = []
        self.url = None
        deadline = time.time() + START_TIMEOUT_S
        for line in self.proc.stderr:
            self.log.append(line)
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.url = found.group(1)
                break
            if time.time() > deadline:
                break
        if self.url is None:
            self.proc.kill()
            raise RuntimeError("flashlane did not start:\n" + "".join(self.log))
        # Keep draining stderr so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def client(self, **kwargs):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kwargs.pop("api_key", "none"), max_retries=0, **kwargs)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def growing_server():
    """Small sessions that a long reply outgrows, as in the design's receipts (§13)."""
    s = Server("--context", "2048", "--slot-contexts", "256x3", "--slot-grow", "64", "--draft", "none")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def big_server():
    """One large session and nothing else: the reference for moved replies."""
    s = Server("--context", "2048", "--parallel", "1", "--draft", "none")
    yield s
    assert s.stop() == 0, "".join(s.log)
