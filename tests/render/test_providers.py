"""Provider bodies, checked against each provider's official SDK: the request types (OpenAI and Anthropic
TypedDicts, google-genai pydantic models), and the real clients sending them over an in-process transport."""

from __future__ import annotations

import base64
import collections.abc
import itertools
import json
import types
from collections.abc import Callable, Iterator
from functools import cache
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import anthropic
import httpx2
import openai
import pydantic
import pytest
from anthropic.types import MessageParam
from google import genai
from google.genai import types as gtypes
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import EasyInputMessageParam, ResponseFunctionToolCallParam, ResponseInputParam
from openai.types.responses.response_input_param import FunctionCallOutput
from typing_extensions import is_typeddict

from attachstore.render.model import IMAGE_ONLY_TOOL_RESULT, TOOL_IMAGES_INTRO, Image, Text, ToolCall, Turn
from attachstore.render.providers import EMPTY, render_body
from tests.support import images

PROVIDERS = ["openai-chat", "openai-responses", "anthropic", "gemini"]
PNG = [images.png(2, 2, seed=seed) for seed in range(3)]


def image(seed: int, detail: Literal["auto", "low", "high"] | None = None) -> Image:
    return Image("image/png", PNG[seed], detail)


def b64(seed: int) -> str:
    """What the body must carry for image(seed): the standard library's base64."""
    return base64.b64encode(PNG[seed]).decode()


def text_only() -> list[Turn]:
    return [
        Turn("system", [Text("Be brief.")]),
        Turn("user", [Text("Hello"), Text("there")]),
        Turn("assistant", [Text("Hi.")]),
    ]


def user_images() -> list[Turn]:
    return [
        Turn(
            "user", [Text("Compare"), image(0), image(1, "high"), Text("[image left out]", placeholder=True)]
        ),
        Turn("assistant", [Text("They differ.")]),
    ]


def tool_round() -> list[Turn]:
    """System, a user image, two parallel tool calls whose results carry images (one image-only, named by
    nothing but its call id; empty texts here and there, as hosts send them), then the conversation goes
    on."""
    return [
        Turn("system", [Text("You can look at screens.")]),
        Turn("user", [Text("What is on screen?"), image(0)]),
        Turn(
            "assistant",
            [Text("")],
            [ToolCall("call_1", "screenshot", {"window": "main"}), ToolCall("call_2", "read_image", {})],
        ),
        Turn("tool", [Text(""), Text("captured"), image(1)], tool_call_id="call_1", name="screenshot"),
        Turn("tool", [image(2, "low")], tool_call_id="call_2"),
        Turn("user", [Text("And now?")]),
        Turn("assistant", [Text("A cat, twice.")]),
    ]


CONVERSATIONS = {"text_only": text_only, "user_images": user_images, "tool_round": tool_round}


# A strict structural check against the SDKs' TypedDicts. pydantic validates TypedDicts but ignores (and
# drops) unknown keys, and validates `Iterable` fields lazily, so it alone would let a misspelt key through.


def conforms(value: object, tp: Any, path: str = "$") -> list[str]:
    """Where `value` departs from the SDK type `tp`: unknown or missing keys, wrong literals, wrong types."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any or tp is object:
        return []
    if origin in (Annotated, Required, NotRequired):
        return conforms(value, args[0], path)
    if origin in (Union, types.UnionType):
        failures = [conforms(value, arm, path) for arm in args]
        return [] if [] in failures else min(failures, key=len)
    if origin is Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__} is not a {tp.__name__}"]
        # Not __required_keys__: the SDKs' modules use `from __future__ import annotations`, which hides
        # Required[...] from the TypedDict machinery, so __required_keys__ is empty for every one of them.
        hints = get_type_hints(tp, include_extras=True)
        required = {k for k, hint in hints.items() if get_origin(hint) is Required}
        errors = [f"{path}.{k}: not a key of {tp.__name__}" for k in value if k not in hints]
        errors += [f"{path}.{k}: missing from {tp.__name__}" for k in sorted(required) if k not in value]
        return errors or [e for k, v in value.items() for e in conforms(v, hints[k], f"{path}.{k}")]
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence) or (
        origin is not None and origin.__name__ == "SequenceNotStr"
    ):
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__} is not a list"]
        return [e for i, v in enumerate(value) for e in conforms(v, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__} is not an object"]
        return [e for k, v in value.items() for e in conforms(v, args[1], f"{path}.{k}")]
    if tp is None or tp is type(None):
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if tp is int and isinstance(value, bool):
        return [f"{path}: a bool is not an int"]
    cls = origin if origin is not None else tp
    if not isinstance(cls, type):
        raise TypeError(f"{path}: the checker does not know {tp!r}")
    return [] if isinstance(value, cls) else [f"{path}: {type(value).__name__} is not a {cls.__name__}"]


@cache
def adapter(tp: Any) -> pydantic.TypeAdapter[Any]:
    # Kept alive on purpose: iterating a lazy `Iterable` result after its TypeAdapter was collected makes
    # pydantic-core panic.
    return pydantic.TypeAdapter(tp)


def materialized(value: Any) -> Any:
    """pydantic's lazily validated iterables, consumed (which validates their items)."""
    if isinstance(value, dict):
        return {k: materialized(v) for k, v in value.items()}
    if isinstance(value, list | Iterator):
        return [materialized(v) for v in value]
    return value


def check_sdk_type(value: Any, tp: Any) -> None:
    """`value` is exactly an instance of the SDK type: pydantic (strict) takes it unchanged, nothing dropped
    and nothing coerced, and no key is unknown to the TypedDicts."""
    assert materialized(adapter(tp).validate_python(value, strict=True)) == value
    assert conforms(value, tp) == []


def check_openai_chat(body: dict[str, Any]) -> None:
    assert list(body) == ["messages"]
    check_sdk_type(body["messages"], list[ChatCompletionMessageParam])
    check_openai_chat_protocol(body["messages"])


def check_openai_chat_protocol(messages: list[dict[str, Any]]) -> None:
    """Every assistant message with tool calls is followed by exactly one tool message per call, and tool
    messages appear nowhere else."""
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        assert message["role"] != "tool", f"message {i - 1}: a tool message that answers no tool call"
        if message["role"] == "assistant" and message.get("tool_calls"):
            answered = []
            while i < len(messages) and messages[i]["role"] == "tool":
                answered.append(messages[i]["tool_call_id"])
                i += 1
            assert sorted(answered) == sorted(c["id"] for c in message["tool_calls"])


def check_openai_responses(body: dict[str, Any]) -> None:
    assert list(body) in (["input"], ["instructions", "input"])
    assert isinstance(body.get("instructions", ""), str)
    check_sdk_type(body["input"], ResponseInputParam)
    # The union has 30-odd members; make sure each item is the one it means to be.
    for item in body["input"]:
        kind = {"function_call": ResponseFunctionToolCallParam, "function_call_output": FunctionCallOutput}
        assert conforms(item, kind.get(item.get("type", ""), EasyInputMessageParam)) == []


def check_anthropic(body: dict[str, Any]) -> None:
    assert list(body) in (["messages"], ["system", "messages"])
    assert isinstance(body.get("system", ""), str)
    check_sdk_type(body["messages"], list[MessageParam])
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), "roles must alternate"
    for message in body["messages"]:
        blocks = [*message["content"], *(b for r in message["content"] for b in r.get("content", []))]
        assert all(b["type"] != "text" or b["text"] for b in blocks), "empty text blocks are refused"
    for message, after in itertools.pairwise(body["messages"]):
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in after["content"] if b["type"] == "tool_result"]
        assert sorted(results) == sorted(uses)
        # the tool results open the answering message
        assert [b["type"] for b in after["content"][: len(results)]] == ["tool_result"] * len(results)


def check_gemini(body: dict[str, Any]) -> None:
    assert list(body) in (["contents"], ["system_instruction", "contents"])
    if "system_instruction" in body:
        check_gemini_content(body["system_instruction"])
        config = gtypes.GenerateContentConfig.model_validate_json(
            json.dumps({"system_instruction": body["system_instruction"]})
        )
        assert config.system_instruction == gtypes.Content.model_validate(body["system_instruction"])
    for content in body["contents"]:
        assert content["role"] in ("user", "model")
        check_gemini_content(content)
    for content, after in itertools.pairwise(body["contents"]):
        calls = [p["function_call"]["name"] for p in content["parts"] if "function_call" in p]
        if calls:  # one function response per call, first in the next content
            answers = [p["function_response"]["name"] for p in after["parts"][: len(calls)]]
            assert answers == calls


def check_gemini_content(content: dict[str, Any]) -> None:
    """The SDK models (extra='forbid') take the content as JSON, and give it back whole."""
    model = gtypes.Content.model_validate_json(json.dumps(content))
    assert model.model_dump(exclude_none=True) == with_bytes(content)
    assert all(part != {"text": ""} for part in content["parts"])


def with_bytes(value: Any) -> Any:
    """The JSON body with its base64 `data` decoded, as the google-genai models hold it."""
    if isinstance(value, dict):
        return {k: base64.b64decode(v) if k == "data" else with_bytes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_bytes(v) for v in value]
    return value


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "openai-chat": check_openai_chat,
    "openai-responses": check_openai_responses,
    "anthropic": check_anthropic,
    "gemini": check_gemini,
}


# Every conversation, every provider: valid for the SDK, and deterministic.


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_body_is_valid_for_the_sdk(provider: str, conversation: str) -> None:
    CHECKS[provider](render_body(provider, CONVERSATIONS[conversation]()))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_same_turns_same_body(provider: str) -> None:
    first = json.dumps(render_body(provider, tool_round()))
    assert json.dumps(render_body(provider, tool_round())) == first


def test_unknown_provider() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        render_body("cohere", text_only())


def test_the_checker_catches_what_pydantic_lets_through() -> None:
    misspelt = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x", "detial": "low"}}]}
    ]
    tp = list[ChatCompletionMessageParam]
    assert materialized(adapter(tp).validate_python(misspelt, strict=True)) != misspelt  # silently dropped
    assert conforms(misspelt, tp) != []
    assert conforms([{"role": "user", "content": [{"type": "image_url"}]}], tp) != []
    assert (
        conforms([{"role": "tool", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], tp) != []
    )


# OpenAI chat.


def test_openai_chat_text_only() -> None:
    assert render_body("openai-chat", text_only()) == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}],
            },
            {"role": "assistant", "content": "Hi."},
        ]
    }


def test_openai_chat_user_images() -> None:
    content = render_body("openai-chat", user_images())["messages"][0]["content"]
    assert content[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(0)}"}}
    assert content[2]["image_url"]["detail"] == "high"
    assert content[3] == {"type": "text", "text": "[image left out]"}


def test_openai_chat_parallel_tool_images_follow_the_whole_run() -> None:
    messages = render_body("openai-chat", tool_round())["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "user",
        "assistant",
    ]
    assistant, first, second, synthetic = messages[2:6]
    assert assistant["content"] is None
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == ['{"window":"main"}', "{}"]
    assert first == {"role": "tool", "tool_call_id": "call_1", "content": "captured"}
    assert second == {"role": "tool", "tool_call_id": "call_2", "content": IMAGE_ONLY_TOOL_RESULT}
    assert synthetic == {
        "role": "user",
        "content": [
            {"type": "text", "text": TOOL_IMAGES_INTRO},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(1)}"}},
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{b64(2)}", "detail": "low"},
            },
        ],
    }
    assert messages[6]["content"] == [{"type": "text", "text": "And now?"}]


def test_openai_chat_tool_runs_without_images_add_no_message() -> None:
    turns = [
        Turn("user", [Text("go")]),
        Turn("assistant", [], [ToolCall("a", "f", {}), ToolCall("b", "f", {})]),
        Turn("tool", [Text("one")], tool_call_id="a"),
        Turn("tool", [Text("[image left out]", placeholder=True)], tool_call_id="b"),
    ]
    body = render_body("openai-chat", turns)
    check_openai_chat(body)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "tool"]
    assert body["messages"][3]["content"] == "[image left out]"


def test_openai_chat_empty_messages() -> None:
    body = render_body("openai-chat", [Turn("user", [Text("")]), Turn("assistant", [])])
    check_openai_chat(body)
    assert body["messages"] == [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]


# OpenAI responses.


def test_openai_responses_tool_round() -> None:
    body = render_body("openai-responses", tool_round())
    assert list(body) == ["instructions", "input"]
    assert body["instructions"] == "You can look at screens."
    items = body["input"]
    assert items[0]["content"][1] == {
        "type": "input_image",
        "image_url": f"data:image/png;base64,{b64(0)}",
        "detail": "auto",  # required by the SDK type for message images
    }
    assert items[1:5] == [
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "screenshot",
            "arguments": '{"window":"main"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "read_image", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": [
                {"type": "input_text", "text": "captured"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{b64(1)}",
                    "detail": "auto",
                },
            ],
        },
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{b64(2)}",
                    "detail": "low",
                }
            ],
        },
    ]
    assert items[6] == {"role": "assistant", "content": "A cat, twice."}


def test_openai_responses_text_tool_output_is_a_string() -> None:
    turns = [
        Turn("user", [Text("go")]),
        Turn("assistant", [Text("Calling.")], [ToolCall("a", "f", {"x": [1, 2]})]),
        Turn("tool", [Text("one"), Text("two")], tool_call_id="a"),
    ]
    body = render_body("openai-responses", turns)
    check_openai_responses(body)
    assert list(body) == ["input"]
    assert body["input"][1] == {"role": "assistant", "content": "Calling."}
    assert body["input"][3] == {"type": "function_call_output", "call_id": "a", "output": "one\ntwo"}


# Anthropic.


def test_anthropic_tool_results_keep_their_images_and_merge_with_the_next_user_turn() -> None:
    body = render_body("anthropic", tool_round())
    assert body["system"] == "You can look at screens."
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == [  # the empty text is left out
        {"type": "tool_use", "id": "call_1", "name": "screenshot", "input": {"window": "main"}},
        {"type": "tool_use", "id": "call_2", "name": "read_image", "input": {}},
    ]
    source = {"type": "base64", "media_type": "image/png"}
    assert messages[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "call_1",
            "content": [
                {"type": "text", "text": "captured"},
                {"type": "image", "source": {**source, "data": b64(1)}},
            ],
        },
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": [{"type": "image", "source": {**source, "data": b64(2)}}],
        },
        {"type": "text", "text": "And now?"},
    ]


def test_anthropic_empty_texts_and_messages() -> None:
    turns = [
        Turn("user", [Text(""), Text("hi")]),
        Turn("assistant", [Text("")]),
        Turn("user", [Text("again")]),
        Turn("assistant", [Text("")], [ToolCall("a", "f", {})]),
        Turn("tool", [Text("")], tool_call_id="a"),
    ]
    body = render_body("anthropic", turns)
    check_anthropic(body)
    assert body == {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": EMPTY}]},
            {"role": "user", "content": [{"type": "text", "text": "again"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        ]
    }


def test_anthropic_tool_results_come_first_in_a_merged_user_message() -> None:
    turns = [
        Turn("assistant", [], [ToolCall("a", "f", {})]),
        Turn("user", [Text("meanwhile")]),
        Turn("tool", [Text("done")], tool_call_id="a"),
    ]
    content = render_body("anthropic", turns)["messages"][1]["content"]
    assert [b["type"] for b in content] == ["tool_result", "text"]


def test_anthropic_system_turns_are_joined() -> None:
    turns = [
        Turn("system", [Text("one"), Text("two")]),
        Turn("user", [Text("hi")]),
        Turn("system", [Text("three")]),
    ]
    assert render_body("anthropic", turns)["system"] == "one\n\ntwo\n\nthree"


# Gemini.


def test_gemini_tool_round() -> None:
    body = render_body("gemini", tool_round())
    assert body["system_instruction"] == {"parts": [{"text": "You can look at screens."}]}
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model"]
    assert contents[1]["parts"] == [
        {"function_call": {"name": "screenshot", "args": {"window": "main"}}},
        {"function_call": {"name": "read_image", "args": {}}},
    ]
    assert contents[2]["parts"] == [
        {"function_response": {"name": "screenshot", "response": {"output": "captured"}}},
        # named after the call it answers
        {"function_response": {"name": "read_image", "response": {"output": IMAGE_ONLY_TOOL_RESULT}}},
        {"inline_data": {"mime_type": "image/png", "data": b64(1)}},
        {"inline_data": {"mime_type": "image/png", "data": b64(2)}},
        {"text": "And now?"},
    ]


def test_gemini_function_response_names() -> None:
    turns = [
        Turn("assistant", [], [ToolCall("a", "from_call", {})]),
        Turn("tool", [Text("1")], tool_call_id="a", name="own_name"),
        Turn("tool", [Text("2")], tool_call_id="a"),
        Turn("tool", [Text("3")], tool_call_id="unknown"),
    ]
    parts = render_body("gemini", turns)["contents"][1]["parts"]
    assert [p["function_response"]["name"] for p in parts] == ["own_name", "from_call", "tool"]


def test_gemini_function_responses_come_first_in_a_merged_user_content() -> None:
    turns = [
        Turn("user", [Text("go")]),
        Turn("assistant", [], [ToolCall("a", "f", {})]),
        Turn("user", [Text("meanwhile"), image(0)]),
        Turn("tool", [Text("done")], tool_call_id="a"),
    ]
    body = render_body("gemini", turns)
    check_gemini(body)
    assert [list(p) for p in body["contents"][2]["parts"]] == [
        ["function_response"],
        ["text"],
        ["inline_data"],
    ]


def test_gemini_images_decode_to_the_same_bytes() -> None:
    body = render_body("gemini", user_images())
    for mode in ("json", "python"):  # a REST client, or a host handing the dicts to the SDK
        content = body["contents"][0]
        model = (
            gtypes.Content.model_validate_json(json.dumps(content))
            if mode == "json"
            else gtypes.Content.model_validate(content)
        )
        blobs = [p.inline_data for p in model.parts or [] if p.inline_data]
        assert [(b.mime_type, b.data) for b in blobs] == [("image/png", PNG[0]), ("image/png", PNG[1])]


def test_gemini_empty_messages() -> None:
    body = render_body("gemini", [Turn("user", [Text("")]), Turn("assistant", [Text("")])])
    check_gemini(body)
    assert body == {
        "contents": [
            {"role": "user", "parts": [{"text": EMPTY}]},
            {"role": "model", "parts": [{"text": EMPTY}]},
        ]
    }


@pytest.mark.parametrize(
    "model", [gtypes.Content, gtypes.Part, gtypes.Blob, gtypes.FunctionCall, gtypes.FunctionResponse]
)
def test_gemini_models_forbid_unknown_fields(model: type[pydantic.BaseModel]) -> None:
    assert model.model_config.get("extra") == "forbid"
    with pytest.raises(pydantic.ValidationError, match="extra_forbidden"):
        model.model_validate_json('{"no_such_field": 1}')


# The real clients, sending the bodies over an in-process transport: what goes on the wire is the body.


def recording_client(answer: dict[str, Any]) -> tuple[httpx2.Client, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json=answer)

    return httpx2.Client(transport=httpx2.MockTransport(handle)), sent


def test_openai_clients_send_the_body_unchanged() -> None:
    http, sent = recording_client({"id": "x", "object": "chat.completion", "choices": [], "output": []})
    client = openai.OpenAI(api_key="test", base_url="http://openai.test/v1", http_client=http, max_retries=0)
    chat = render_body("openai-chat", tool_round())
    client.chat.completions.create(model="gpt-test", **chat)
    responses = render_body("openai-responses", tool_round())
    client.responses.create(model="gpt-test", **responses)
    assert sent == [{"model": "gpt-test", **chat}, {"model": "gpt-test", **responses}]


def test_anthropic_client_sends_the_body_unchanged() -> None:
    http, sent = recording_client({"id": "x", "type": "message", "role": "assistant", "content": []})
    client = anthropic.Anthropic(
        api_key="test", base_url="http://anthropic.test", http_client=http, max_retries=0
    )
    body = render_body("anthropic", tool_round())
    client.messages.create(model="claude-test", max_tokens=16, **body)
    assert sent == [{"model": "claude-test", "max_tokens": 16, **body}]


def test_gemini_client_sends_the_images_and_function_responses() -> None:
    http, sent = recording_client({"candidates": []})
    options = gtypes.HttpOptions(base_url="http://gemini.test", httpx_client=http)
    client = genai.Client(api_key="test", http_options=options)
    body = render_body("gemini", tool_round())
    config = gtypes.GenerateContentConfig(system_instruction=body["system_instruction"])
    client.models.generate_content(model="gemini-test", contents=body["contents"], config=config)
    (request,) = sent
    assert request["systemInstruction"]["parts"] == [{"text": "You can look at screens."}]
    parts = request["contents"][2]["parts"]
    assert parts[1]["functionResponse"] == {
        "name": "read_image",
        "response": {"output": IMAGE_ONLY_TOOL_RESULT},
    }
    # the client re-encodes the bytes in the URL-safe base64 alphabet, which the API takes too
    assert [base64.urlsafe_b64decode(p["inlineData"]["data"]) for p in parts[2:4]] == PNG[1:3]
    assert [c["role"] for c in request["contents"]] == ["user", "model", "user", "model"]
