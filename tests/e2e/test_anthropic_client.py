"""Anthropic's Messages API through the official anthropic client, on the default model.

`/v1/messages` renders the same chat a chat completion would and runs it on the same engine, so
every reply here is compared with the chat API's reply to the same conversation: the same text,
thinking and tool calls, token for token, whole and streamed.
"""

import json

import anthropic
import pytest

from conftest import Server

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                     "required": ["city"]},
}
# Anthropic's current clients have no `temperature` argument; the server still reads the field
# (older clients send it), and every comparison here is of greedy replies.
GREEDY = {"temperature": 0}
# The same tool as the chat API takes it.
WEATHER_FUNCTION = {"type": "function", "function": {
    "name": WEATHER["name"], "description": WEATHER["description"], "parameters": WEATHER["input_schema"]}}


@pytest.fixture(scope="module")
def server():
    # An alias as an agent's background requests name their model (Claude Code's small model).
    s = Server("--api-key", "sesame", "--served-model-name", "claude-haiku-4-5")
    yield s
    assert s.stop() == 0, "".join(s.log)


def clients(server):
    """An Anthropic client (its key in `x-api-key`) and an OpenAI one, on the same server."""
    return (anthropic.Anthropic(base_url=server.url, api_key="sesame", max_retries=0),
            server.client(api_key="sesame"))


def test_a_message_is_the_chat_apis_reply_whole_and_streamed(server):
    claude, openai_client = clients(server)
    question = "Count from 1 to 5."
    chat = openai_client.chat.completions.create(
        model="m", temperature=0, max_tokens=40,
        messages=[{"role": "system", "content": "You count."}, {"role": "user", "content": question}])
    message = claude.messages.create(model="m", max_tokens=40, extra_body=GREEDY, system="You count.",
                                     messages=[{"role": "user", "content": question}])
    assert message.role == "assistant" and message.model == "m" and message.id.startswith("msg_")
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == chat.choices[0].message.content
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
    assert message.usage.input_tokens == chat.usage.prompt_tokens
    assert message.usage.output_tokens == chat.usage.completion_tokens
    with claude.messages.stream(model="m", max_tokens=40, extra_body=GREEDY, system="You count.",
                                messages=[{"role": "user", "content": question}]) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed_text == message.content[0].text
    assert [(b.type, b.text) for b in final.content] == [(b.type, b.text) for b in message.content]
    assert (final.stop_reason, final.usage.output_tokens) == (message.stop_reason, message.usage.output_tokens)
    counted = claude.messages.count_tokens(model="m", system="You count.",
                                           messages=[{"role": "user", "content": question}])
    assert counted.input_tokens == message.usage.input_tokens


def test_a_stop_sequence_ends_the_message_and_is_named(server):
    claude, _ = clients(server)
    ask = dict(model="m", max_tokens=40, extra_body=GREEDY, messages=[{"role": "user", "content": "Count from 1 to 9."}])
    full = claude.messages.create(**ask).content[0].text
    assert "4" in full, full
    message = claude.messages.create(stop_sequences=["4"], **ask)
    assert message.content[0].text == full[:full.index("4")]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "4")


def test_the_model_calls_a_tool_by_itself_and_answers_from_its_result(server):
    """As the chat API's test of the same: the default model (trained for it) decides to call."""
    claude, openai_client = clients(server)
    question = [{"role": "user", "content": "What's the weather in Paris?"}]
    message = claude.messages.create(model="m", max_tokens=60, extra_body=GREEDY, tools=[WEATHER], messages=question)
    assert message.stop_reason == "tool_use", message
    [call] = [block for block in message.content if block.type == "tool_use"]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("toolu_")
    chat_call = openai_client.chat.completions.create(
        model="m", messages=question, tools=[WEATHER_FUNCTION], temperature=0, max_tokens=60,
    ).choices[0].message.tool_calls[0]
    assert json.loads(chat_call.function.arguments) == call.input
    # The result goes back as a tool_result block; the answer is the chat API's.
    answer = claude.messages.create(
        model="m", max_tokens=60, extra_body=GREEDY, tools=[WEATHER],
        messages=question + [
            {"role": "assistant", "content": message.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": json.dumps({"temperature": 21, "condition": "sunny"})}]},
        ])
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].text == "It is sunny in Paris, 21 degrees."


def test_a_named_tool_streams_its_input_as_json_deltas(server):
    claude, _ = clients(server)
    ask = dict(model="m", max_tokens=200, extra_body=GREEDY, tools=[WEATHER],
               tool_choice={"type": "tool", "name": "get_weather"},
               messages=[{"role": "user", "content": "What is the weather in Rome?"}])
    whole = claude.messages.create(**ask)
    assert whole.stop_reason == "tool_use"
    [call] = [block for block in whole.content if block.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input.get("city"), str)
    with claude.messages.stream(**ask) as stream:
        partial = "".join(event.delta.partial_json for event in stream
                          if event.type == "content_block_delta" and event.delta.type == "input_json_delta")
        final = stream.get_final_message()
    assert json.loads(partial) == call.input
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == \
        [(b.type, getattr(b, "input", None)) for b in whole.content]


def test_thinking_comes_as_a_thinking_block_and_is_the_chat_apis_reasoning(server):
    claude, openai_client = clients(server)
    # A question the default model thinks about for longer than the budget (see the chat API's
    # thinking test).
    question = [{"role": "user", "content": "What is 12 + 5?"}]
    chat = openai_client.chat.completions.create(
        model="m", messages=question, temperature=0, max_tokens=40,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}, "thinking_budget": 2}).choices[0].message
    message = claude.messages.create(model="m", max_tokens=40, extra_body=GREEDY, messages=question,
                                     thinking={"type": "enabled", "budget_tokens": 2})
    thinking = [block.thinking for block in message.content if block.type == "thinking"]
    text = [block.text for block in message.content if block.type == "text"]
    assert message.content[0].type == "thinking"
    assert "".join(thinking) == getattr(chat, "reasoning_content", None), (message, chat)
    assert "".join(text) == (chat.content or "").rstrip(), (message, chat)


def test_bad_requests_get_anthropics_errors_and_the_key_is_checked(server):
    claude, _ = clients(server)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[0]" in refused.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-opus", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    stranger = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        stranger.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])


def test_an_output_format_holds_the_reply_to_its_schema(server):
    claude, _ = clients(server)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    message = claude.messages.create(model="m", max_tokens=60, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": "Count from 1 to 5."}],
                                     output_config={"format": {"type": "json_schema", "schema": schema}})
    assert message.stop_reason == "end_turn", message
    value = json.loads(message.content[0].text)
    assert isinstance(value["n"], int) and 1 <= value["n"] <= 9 and set(value) == {"n"}


def test_a_prefilled_assistant_turn_is_continued_as_the_chat_api_continues_it(server):
    """Anthropic's prefill and the chat API's `continue_final_message`: the reply goes on from
    the assistant's text (and does not repeat it)."""
    claude, openai_client = clients(server)
    conversation = [{"role": "user", "content": "Count from 1 to 6."}, {"role": "assistant", "content": "1\n2\n3\n"}]
    chat = openai_client.chat.completions.create(
        model="m", messages=conversation, temperature=0, max_tokens=40,
        extra_body={"continue_final_message": True, "add_generation_prompt": False}).choices[0].message.content
    assert chat.startswith("4\n5\n6"), chat
    message = claude.messages.create(model="m", max_tokens=40, extra_body=GREEDY, messages=conversation)
    assert message.content[0].text == chat


def test_an_alias_of_the_served_model_is_served_and_listed(server):
    claude, openai_client = clients(server)
    message = claude.messages.create(model="claude-haiku-4-5", max_tokens=5, extra_body=GREEDY,
                                     messages=[{"role": "user", "content": "Count from 1 to 5."}])
    assert message.model == "m" and message.content[0].text
    assert [m.id for m in openai_client.models.list().data] == ["m", "claude-haiku-4-5"]
    assert [m.id for m in claude.models.list().data] == ["m", "claude-haiku-4-5"]
