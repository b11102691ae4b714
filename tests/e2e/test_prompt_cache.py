"""The prompt cache through the official openai client: requests that share a long system prompt
start from its cached blocks (the metrics say so) and get the replies computed from scratch."""

import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Server

SYSTEM = "You are a careful counting assistant. " + " ".join(
    f"Rule {i}: count every number once, in order." for i in range(120)
)


@pytest.fixture(scope="module")
def cache_server():
    s = Server("--draft", "mtp")
    yield s
    assert s.stop() == 0, "".join(s.log)


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics") as response:
        text = response.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def ask(client, n, **extra):
    reply = client.chat.completions.create(
        model="m", temperature=0, max_tokens=40,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Count from 1 to {n}."}],
        extra_body=extra or None,
    )
    return reply.choices[0].message.content, reply.usage.prompt_tokens


def test_shared_system_prompts_hit_the_cache_and_replies_stay_the_same(cache_server):
    client = cache_server.client()
    before = metrics(cache_server)
    computed = [ask(client, n, cache_prompt=False) for n in (5, 6, 7, 8)]
    assert metrics(cache_server)["flashlane_prompt_cache_hits_total"] == before["flashlane_prompt_cache_hits_total"]
    prompt_tokens = computed[0][1]
    assert prompt_tokens > 1024, f"the system prompt is {prompt_tokens} tokens: too short for two blocks"
    cached = [ask(client, n) for n in (5, 6, 7, 8)]
    assert cached == computed
    after = metrics(cache_server)
    hits = after["flashlane_prompt_cache_hits_total"] - before["flashlane_prompt_cache_hits_total"]
    reused = after["flashlane_prompt_cache_tokens_reused_total"] - before["flashlane_prompt_cache_tokens_reused_total"]
    assert hits >= 3, after
    assert reused >= 3 * 1024, after
    assert after["flashlane_prompt_cache_bytes"] > 0


def test_concurrent_requests_from_the_cache_equal_their_solo_replies(cache_server):
    client = cache_server.client()
    counts = list(range(3, 11))
    solo = [ask(client, n, cache_prompt=False) for n in counts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda n: ask(client, n), counts))
    assert together == solo


def test_every_api_reports_the_prompt_tokens_the_cache_held(cache_server):
    """The chat API's `prompt_tokens_details.cached_tokens`, the Responses API's
    `input_tokens_details.cached_tokens` and Anthropic's `cache_read_input_tokens` (with its
    `input_tokens` the rest of the prompt) all say how much of the prompt came from the cache."""
    import anthropic

    client = cache_server.client()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Count from 1 to 4."}]
    uncached = client.chat.completions.create(model="m", temperature=0, max_tokens=8, messages=messages,
                                              extra_body={"cache_prompt": False}).usage
    assert uncached.prompt_tokens_details.cached_tokens == 0
    client.chat.completions.create(model="m", temperature=0, max_tokens=8, messages=messages)  # fills the cache
    chat = client.chat.completions.create(model="m", temperature=0, max_tokens=8, messages=messages).usage
    assert chat.prompt_tokens == uncached.prompt_tokens
    assert 1024 <= chat.prompt_tokens_details.cached_tokens < chat.prompt_tokens, chat
    response = client.responses.create(model="m", temperature=0, max_output_tokens=8, instructions=SYSTEM,
                                       input="Count from 1 to 4.").usage
    assert (response.input_tokens, response.input_tokens_details.cached_tokens) == \
        (chat.prompt_tokens, chat.prompt_tokens_details.cached_tokens)
    claude = anthropic.Anthropic(base_url=cache_server.url, api_key="none", max_retries=0)
    message = claude.messages.create(model="m", max_tokens=8, system=SYSTEM, extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": "Count from 1 to 4."}]).usage
    assert message.cache_read_input_tokens == chat.prompt_tokens_details.cached_tokens
    assert message.input_tokens + message.cache_read_input_tokens == chat.prompt_tokens
    with claude.messages.stream(model="m", max_tokens=8, system=SYSTEM, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "Count from 1 to 4."}]) as stream:
        first = next(iter(stream))
        assert first.type == "message_start"
        assert first.message.usage.cache_read_input_tokens == message.cache_read_input_tokens
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens == message.cache_read_input_tokens
