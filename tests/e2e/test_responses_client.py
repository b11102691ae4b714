"""OpenAI's Responses API (`/v1/responses`) through the official openai client, on the default model.

A response renders the same chat a chat completion would and runs on the same engine, so every
reply here is compared with the chat API's reply to the same conversation, whole and streamed.
"""

import json

import openai
import pytest

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                          "required": ["city"]}}
WEATHER_FUNCTION = {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}


def test_a_response_is_the_chat_apis_reply_whole_and_streamed(server):
    client = server.client()
    chat = client.chat.completions.create(
        model="m", temperature=0, max_tokens=40,
        messages=[{"role": "system", "content": "You count."}, {"role": "user", "content": "Count from 1 to 5."}])
    ask = dict(model="m", instructions="You count.", input="Count from 1 to 5.", temperature=0, max_output_tokens=40)
    response = client.responses.create(**ask)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    with client.responses.stream(**ask) as stream:
        deltas = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == response.output_text
    assert final.output_text == response.output_text and final.status == "completed"


def test_max_output_tokens_leaves_the_response_incomplete(server):
    response = server.client().responses.create(model="m", input="Count from 1 to 50.", temperature=0,
                                                max_output_tokens=5)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage.output_tokens == 5


def test_the_model_calls_a_function_and_answers_from_its_output(server):
    """As the chat API's test of the same: the default model (trained for it) decides to call."""
    client = server.client()
    question = [{"role": "user", "content": "What's the weather in Paris?"}]
    response = client.responses.create(model="m", input=question, tools=[WEATHER], temperature=0,
                                       max_output_tokens=60)
    [call] = [item for item in response.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.call_id.startswith("call_")
    chat_call = client.chat.completions.create(
        model="m", messages=question, tools=[WEATHER_FUNCTION], temperature=0, max_tokens=60,
    ).choices[0].message.tool_calls[0]
    assert chat_call.function.arguments == call.arguments
    # The output goes back as input, with the function's result; the answer is the chat API's.
    answer = client.responses.create(
        model="m", tools=[WEATHER], temperature=0, max_output_tokens=60,
        input=question + [item.model_dump(exclude_none=True) for item in response.output] + [
            {"type": "function_call_output", "call_id": call.call_id,
             "output": json.dumps({"temperature": 21, "condition": "sunny"})}])
    assert answer.output_text == "It is sunny in Paris, 21 degrees."


def test_a_named_function_streams_its_arguments(server):
    client = server.client()
    ask = dict(model="m", input="What is the weather in Rome?", tools=[WEATHER], temperature=0,
               max_output_tokens=200, tool_choice={"type": "function", "name": "get_weather"})
    whole = client.responses.create(**ask)
    [call] = [item for item in whole.output if item.type == "function_call"]
    assert isinstance(json.loads(call.arguments)["city"], str)
    with client.responses.stream(**ask) as stream:
        done = [event for event in stream if event.type == "response.function_call_arguments.done"]
    assert [event.arguments for event in done] == [call.arguments]


def test_a_text_format_holds_the_reply_to_its_schema(server):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    response = server.client().responses.create(
        model="m", input="Count from 1 to 5.", temperature=0, max_output_tokens=60,
        text={"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True}})
    value = json.loads(response.output_text)
    assert set(value) == {"n"} and 1 <= value["n"] <= 9


def test_reasoning_comes_as_a_reasoning_item_and_is_the_chat_apis_reasoning(server):
    client = server.client()
    question = [{"role": "user", "content": "What is 12 + 5?"}]
    chat = client.chat.completions.create(
        model="m", messages=question, temperature=0, max_tokens=40,
        extra_body={"chat_template_kwargs": {"enable_thinking": True}}).choices[0].message
    response = client.responses.create(model="m", input=question, temperature=0, max_output_tokens=40,
                                       reasoning={"effort": "high"})
    assert response.output[0].type == "reasoning"
    thought = "".join(part.text for item in response.output if item.type == "reasoning" for part in item.content)
    assert thought == getattr(chat, "reasoning_content", None)
    assert response.output_text == (chat.content or "")
    assert response.usage.output_tokens_details.reasoning_tokens > 0


def test_what_needs_a_stored_response_is_refused_naming_the_field(server):
    with pytest.raises(openai.BadRequestError) as refused:
        server.client().responses.create(model="m", input="hi", previous_response_id="resp_123")
    assert refused.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as refused:
        server.client().responses.create(model="m", input="hi", tools=[{"type": "web_search"}])
    assert refused.value.body["param"] == "tools[0].type"


def test_the_output_texts_log_probabilities_are_the_chat_apis(server):
    client = server.client()
    chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Count from 1 to 3."}],
                                          temperature=0, max_tokens=10, logprobs=True, top_logprobs=2)
    response = client.responses.create(model="m", input="Count from 1 to 3.", temperature=0, max_output_tokens=10,
                                       include=["message.output_text.logprobs"], top_logprobs=2)
    got = response.output[-1].content[0].logprobs
    want = chat.choices[0].logprobs.content
    # (The default model does not think here: every token of the reply is the text's.)
    assert [(g.token, g.logprob) for g in got] == [(w.token, w.logprob) for w in want]
    assert got and all(len(g.top_logprobs) == 2 for g in got)
