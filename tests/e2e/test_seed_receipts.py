"""The design's receipts (docs/design.md §13), scaled to the embedded model on the CPU (issue 6).

A counting reply that outgrows two sessions moves twice and equals a run that never moved,
character for character; two such replies at once: one moves, the other waits, both equal.
"""

import concurrent.futures
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server

# 2,200 tokens of reply: more than the 2048 session, less than the engine's 8192.
COUNT = [{"role": "user", "content": "Count from 1 to 600."}]
ARGS = dict(model="m", messages=COUNT, max_tokens=2200, temperature=0)


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture(scope="module")
def unmoved():
    server = Server("--context", "8192", "--parallel", "1", "--draft", "none")
    try:
        reply = server.client().chat.completions.create(**ARGS)
    finally:
        assert server.stop() == 0, "".join(server.log)
    text = reply.choices[0].message.content
    complete_lines = text.split("\n")[:-1]
    numbers = [int(line) for line in complete_lines]
    assert len(numbers) > 500 and numbers == list(range(1, len(numbers) + 1)), "counts in order"
    assert reply.usage.completion_tokens == 2200
    return text


def test_a_counting_reply_moves_twice_and_equals_the_unmoved_reply(unmoved):
    server = Server("--context", "8192", "--slot-contexts", "2048,512x3", "--slot-grow", "256",
                    "--draft", "none")
    try:
        moved = server.client().chat.completions.create(**ARGS).choices[0].message.content
        assert moved == unmoved
        assert metrics(server)["flashlane_moves_total"] == 2
    finally:
        assert server.stop() == 0, "".join(server.log)


def test_two_growing_at_once_one_moves_the_other_waits_both_equal(unmoved):
    server = Server("--context", "8192", "--slot-contexts", "512x3", "--slot-grow", "256",
                    "--draft", "none")
    try:
        client = server.client()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda _: client.chat.completions.create(**ARGS), range(2)))
        assert [r.choices[0].message.content for r in replies] == [unmoved, unmoved]
        seen = metrics(server)
        assert seen["flashlane_moves_total"] == 2
        assert seen["flashlane_pauses_total"] >= 1
        slots = json.loads(urllib.request.urlopen(server.url + "/slots", timeout=30).read())
        assert all(s["state"] == "free" for s in slots["sessions"])
    finally:
        assert server.stop() == 0, "".join(server.log)
