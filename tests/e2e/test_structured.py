"""Structured outputs and tool calling through the official openai client, on the default model.

The grammar (llguidance) decides which tokens each position allows, so even the tiny default
model answers with JSON valid under the schema and with tool calls whose arguments follow the
function's parameters. A constrained reply is the same with any draft mode and beside other
streams (greedy sampling), and a grammar that cannot finish within max_tokens ends with `length`.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import Server

PROMPT = [{"role": "user", "content": "Count from 1 to 5."}]

# Twenty schemas: nested objects, enums, arrays, numbers with bounds, strings with lengths and
# patterns, nulls, unions. Strings and arrays are bounded so that a model that likes to repeat
# itself still reaches the end of the value within max_tokens.
SCHEMAS = [
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False},
    {"type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1, "maxItems": 5}}, "required": ["numbers"]},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}, "required": ["name"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}}, "required": ["code"]},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -5, "maximum": 5}, "y": {"type": "integer", "minimum": -5, "maximum": 5}}, "required": ["x", "y"], "additionalProperties": False}}, "required": ["point"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}, "required": ["tags"]},
    {"type": "object", "properties": {"value": {"type": "null"}}, "required": ["value"]},
    {"type": "object", "properties": {"level": {"type": "integer", "enum": [1, 2, 3]}, "label": {"type": "string", "maxLength": 6}}, "required": ["level", "label"]},
    {"type": "object", "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 1000}, {"type": "string", "maxLength": 4}]}}, "required": ["id"]},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": {"type": "boolean"}}, "required": ["c"]}}, "required": ["b"]}}, "required": ["a"]},
    {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 5}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"first": {"type": "integer", "minimum": 1, "maximum": 3}, "second": {"type": "integer", "minimum": 4, "maximum": 6}, "third": {"type": "integer", "minimum": 7, "maximum": 9}}, "required": ["first", "second", "third"], "additionalProperties": False},
    {"type": "object", "properties": {"status": {"const": "done"}, "count": {"type": "integer", "minimum": 0, "maximum": 50}}, "required": ["status", "count"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["x", "y"]}, "v": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["k", "v"], "additionalProperties": False}, "minItems": 1, "maxItems": 2}}, "required": ["items"]},
    {"type": "object", "properties": {"word": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"}}, "required": ["word"]},
    {"type": "object", "properties": {"flag": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 5}}, "required": ["flag", "note"]},
    {"type": "object", "properties": {"matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 2}, "minItems": 2, "maxItems": 2}}, "required": ["matrix"]},
    {"type": "object", "properties": {"day": {"enum": ["mon", "tue", "wed"]}, "hours": {"type": "integer", "minimum": 0, "maximum": 23}, "open": {"type": "boolean"}}, "required": ["day", "hours", "open"], "additionalProperties": False},
]



def strict(schema):
    """Objects take no properties beyond their own, as OpenAI's strict mode requires (a model
    that likes to go on would otherwise add keys until max_tokens)."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if schema.get("type") == "object":
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


SCHEMAS = [strict(s) for s in SCHEMAS]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]}},
}


@pytest.fixture(scope="module")
def servers():
    """The same model with each draft mode."""
    started = {mode: Server("--draft", mode) for mode in ("none", "ngram", "mtp")}
    yield started
    for s in started.values():
        assert s.stop() == 0, "".join(s.log)


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def constrained(client, schema, messages=PROMPT, max_tokens=200):
    return client.chat.completions.create(
        model="m", messages=messages, temperature=0, max_tokens=max_tokens,
        response_format=schema_format(schema),
    )


def test_twenty_json_schemas_give_replies_that_validate(servers):
    client = servers["none"].client()
    for i, schema in enumerate(SCHEMAS):
        reply = constrained(client, schema)
        choice = reply.choices[0]
        assert choice.finish_reason == "stop", (i, choice)
        value = json.loads(choice.message.content)
        jsonschema.validate(value, schema)


def test_json_object_mode_gives_an_object(servers):
    reply = servers["none"].client().chat.completions.create(
        model="m", messages=PROMPT, temperature=0, max_tokens=200,
        response_format={"type": "json_object"},
    )
    assert reply.choices[0].finish_reason in ("stop", "length")
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_constrained_replies_are_the_same_with_every_draft_mode_and_under_load(servers):
    schemas = SCHEMAS[:16]
    prompts = [[{"role": "user", "content": f"Count from {i} to {i + 4}."}] for i in range(1, 17)]
    solo = [constrained(servers["none"].client(), s, p).choices[0].message.content for s, p in zip(schemas, prompts)]
    for mode in ("ngram", "mtp"):
        client = servers[mode].client()
        drafted = [constrained(client, s, p).choices[0].message.content for s, p in zip(schemas, prompts)]
        assert drafted == solo, mode
    # Sixteen at once, each beside fifteen others.
    client = servers["mtp"].client()
    with ThreadPoolExecutor(max_workers=16) as pool:
        together = list(pool.map(lambda sp: constrained(client, *sp).choices[0].message.content, zip(schemas, prompts)))
    assert together == solo


def ask_weather(client, **kwargs):
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        temperature=0, max_tokens=200, tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, **kwargs,
    )


def test_a_named_tool_choice_calls_it_with_valid_arguments_and_the_result_is_accepted(servers):
    client = servers["none"].client()
    reply = ask_weather(client)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    # The next turn: the call and its result go back; the server renders and answers them.
    follow = client.chat.completions.create(
        model="m", temperature=0, max_tokens=20, tools=[WEATHER, TIME],
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})},
        ],
    )
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_the_default_model_calls_a_tool_by_itself_and_answers_from_its_result(servers):
    """`tool_choice` auto: nothing is enforced, the model (trained for it) decides to call."""
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                       "required": ["city"]}}}
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    for mode, server in servers.items():
        client = server.client()
        reply = client.chat.completions.create(model="m", messages=messages, tools=[weather], temperature=0,
                                               max_tokens=60)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls", (mode, choice)
        [call] = choice.message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"}), mode
        answer = client.chat.completions.create(
            model="m", temperature=0, max_tokens=60, tools=[weather],
            messages=messages + [
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "condition": "sunny"})},
            ],
        ).choices[0]
        assert (answer.finish_reason, answer.message.content) == ("stop", "It is sunny in Paris, 21 degrees."), mode


def test_required_tool_choice_calls_some_tool(servers):
    reply = servers["none"].client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What time is it?"}], temperature=0,
        max_tokens=200, tools=[WEATHER, TIME], tool_choice="required",
    )
    calls = reply.choices[0].message.tool_calls
    assert calls, reply
    for call in calls:
        schema = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]["function"]["parameters"]
        jsonschema.validate(json.loads(call.function.arguments), schema)


def test_streamed_tool_call_deltas_reassemble_to_the_whole_reply(servers):
    client = servers["none"].client()
    whole = ask_weather(client).choices[0].message.tool_calls
    calls = {}
    finish = None
    for chunk in ask_weather(client, stream=True):
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = delta.id or call["id"]
            if delta.function.name:
                call["name"] += delta.function.name
            call["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == [
        (c.function.name, c.function.arguments) for c in whole
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_a_grammar_that_cannot_finish_in_time_ends_by_length(servers):
    schema = {"type": "object", "properties": {"text": {"type": "string", "minLength": 40}}, "required": ["text"]}
    reply = constrained(servers["none"].client(), schema, max_tokens=5)
    assert reply.choices[0].finish_reason == "length"


def test_regex_and_choice_extensions(servers):
    client = servers["none"].client()
    reply = client.chat.completions.create(
        model="m", messages=PROMPT, temperature=0, max_tokens=30,
        extra_body={"guided_regex": "[0-9]{3}-[a-z]{2}"},
    )
    import re
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", reply.choices[0].message.content), reply
    reply = client.chat.completions.create(
        model="m", messages=PROMPT, temperature=0, max_tokens=30,
        extra_body={"guided_choice": ["alpha", "beta", "gamma"]},
    )
    assert reply.choices[0].message.content in ("alpha", "beta", "gamma")


def test_completions_take_a_constraint_too(servers):
    reply = servers["none"].client().completions.create(
        model="m", prompt="The numbers:", temperature=0, max_tokens=40,
        extra_body={"guided_json": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 3, "maxItems": 3}},
    )
    value = json.loads(reply.choices[0].text)
    assert len(value) == 3 and all(0 <= v <= 9 for v in value), reply


@pytest.mark.parametrize(
    "kwargs, param",
    [
        ({"response_format": schema_format({"type": "object", "properties": {"a": {"type": "no-such-type"}}})}, "response_format"),
        ({"extra_body": {"guided_grammar": "start: /(/"}}, "guided_grammar"),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools[0].function.name"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ],
)
def test_bad_grammars_and_tools_are_refused_naming_the_field(servers, kwargs, param):
    client = servers["none"].client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model="m", messages=PROMPT, max_tokens=5, **kwargs)
    assert error.value.body["param"] == param, error.value.body
    # And the server keeps serving.
    assert constrained(client, SCHEMAS[0]).choices[0].finish_reason == "stop"
