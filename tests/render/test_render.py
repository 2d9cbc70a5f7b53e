"""POST /v1/render through the real app: projection, budget, unavailable images, determinism."""

from __future__ import annotations

import base64
import io
import json
import threading
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient

from attachstore.api import render as render_api
from attachstore.api.common import STORE
from attachstore.api.render import Answer, ImageSlot
from attachstore.errors import ServerBusy
from attachstore.refs import Ref
from attachstore.render import MessageIn, Rendered, RenderRequest, Summary, assemble, plan, providers, tokens
from attachstore.render import render as render_in_process
from attachstore.render.model import Image, Text, Turn
from attachstore.render.neutral import MAX_NESTING
from attachstore.render.providers import render_body
from attachstore.service import Store
from tests.conftest import MakeClient
from tests.support.faults import flip_byte
from tests.support.http import admit, error_of, post_json
from tests.support.images import jpeg, png

Client = TestClient[Any, Any]
ROUTES = {
    "vision": {"input_modalities": ["text", "image"], "provider": "openai-chat"},
    "texty": {
        "input_modalities": ["text"],
        "provider": "anthropic",
        "placeholders": {"text_only": "[Bild weggelassen]"},
    },
    "small": {"input_modalities": ["text", "image"], "provider": "openai-chat", "max_request_images": 2},
    "capped": {
        "input_modalities": ["text", "image"],
        "provider": "openai-chat",
        "max_request_image_bytes": 600,
    },
}


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client(routes=ROUTES)


async def stored(client: Client, *images: bytes) -> list[str]:
    response = await admit(client, *images)
    assert response.status == 201
    return [a["ref"] for a in (await response.json())["attachments"]]


def image(ref: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image", "ref": ref, **extra}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


async def render(client: Client, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    response = await post_json(client, "/v1/render", {"messages": messages, **fields})
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def image_urls(message: dict[str, Any]) -> list[str]:
    return [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["content"] if p["type"] == "text"]


def corrupt_all(store: Store, refs: list[str]) -> None:
    for ref in refs:
        flip_byte(store.local.path(Ref.parse(ref)), 30)


async def test_a_vision_route_gets_verified_data_urls(client: Client) -> None:
    a, b = png(30, 20), jpeg(16, 16)
    refs = await stored(client, a, b)
    out = await render(
        client, [{"role": "user", "content": [text("look"), image(refs[0]), image(refs[1])]}], route="vision"
    )
    assert out["provider"] == "openai-chat"
    [message] = out["body"]["messages"]
    assert image_urls(message) == [
        "data:image/png;base64," + base64.b64encode(a).decode(),
        "data:image/jpeg;base64," + base64.b64encode(b).decode(),
    ]
    assert out["summary"] == {
        "included": 2,
        "omitted": 0,
        "unavailable": 0,
        "base64_bytes": len(base64.b64encode(a)) + len(base64.b64encode(b)),
        "estimated_image_tokens": 2 * 255,
        "resized": 0,
    }


async def test_text_only_projection_reads_nothing(client: Client) -> None:
    refs = await stored(client, png(5, 5), png(6, 6), png(7, 7))
    corrupt_all(client.app[STORE], refs)  # a read would find them damaged
    messages = [
        {
            "role": "user",
            "content": [text("before"), image(refs[0]), image(refs[1]), text("after"), image(refs[2])],
        }
    ]
    out = await render(client, messages, route="texty")
    assert out["provider"] == "anthropic"
    [message] = out["body"]["messages"]
    assert [b["text"] for b in message["content"]] == ["before", "[Bild weggelassen]", "after"]
    assert out["summary"]["omitted"] == 3
    assert out["summary"]["unavailable"] == 0
    # Nothing was read, so nothing was found damaged and quarantined.
    for ref in refs:
        assert (await client.app[STORE].index.get(ref)).state == "ok"  # type: ignore[union-attr]


async def test_vision_false_projects_a_vision_route(client: Client) -> None:
    refs = await stored(client, png(5, 5))
    out = await render(client, [{"role": "user", "content": [image(refs[0])]}], route="vision", vision=False)
    assert texts(out["body"]["messages"][0]) == ["[image omitted: this model does not accept images]"]


async def test_the_oldest_images_leave_first_and_are_never_read(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = [png(40, 40, seed=i) for i in range(6)]  # same size: the budget counts whole images
    refs = await stored(client, *images)
    each = len(base64.b64encode(images[0]))
    read: list[str] = []
    store = client.app[STORE]
    real = store.verified_many

    async def recording(wanted: Any, *rest: Any) -> Any:
        read.extend(str(ref) for ref, _ in wanted)
        return await real(wanted, *rest)

    monkeypatch.setattr(store, "verified_many", recording)
    messages = [
        {
            "role": "user",
            "content": [text(f"shot {i}"), image(ref, **({"path": f"/w/{i}.png"} if i == 1 else {}))],
        }
        for i, ref in enumerate(refs)
    ]
    first = await post_json(
        client, "/v1/render", {"messages": messages, "route": "vision", "max_image_bytes": 3 * each}
    )
    body = await first.read()
    out = json.loads(body)
    sent = [image_urls(m) != [] for m in out["body"]["messages"]]
    assert sent == [False, False, False, True, True, True]
    assert texts(out["body"]["messages"][1])[1].endswith("read the file again: /w/1.png]")
    assert "ask the user to attach it again" in texts(out["body"]["messages"][0])[1]
    assert sorted(read) == sorted(refs[3:])
    assert out["summary"]["included"] == 3
    assert out["summary"]["omitted"] == 3
    # Same input, same output, byte for byte.
    again = await post_json(
        client, "/v1/render", {"messages": messages, "route": "vision", "max_image_bytes": 3 * each}
    )
    assert await again.read() == body


async def test_an_image_count_budget_from_the_route(client: Client) -> None:
    refs = await stored(client, *(png(8, 8, seed=i) for i in range(4)))
    out = await render(client, [{"role": "user", "content": [image(r) for r in refs]}], route="small")
    assert out["summary"]["included"] == 2
    assert len(image_urls(out["body"]["messages"][0])) == 2
    out = await render(
        client, [{"role": "user", "content": [image(r) for r in refs]}], route="small", max_images=3
    )
    assert out["summary"]["included"] == 3


async def test_a_request_lowers_the_routes_byte_budget_but_never_raises_it(client: Client) -> None:
    refs = await stored(client, *(png(8, 8, seed=i) for i in range(4)))
    each = len(base64.b64encode(png(8, 8)))
    messages = [{"role": "user", "content": [image(r) for r in refs]}]
    out = await render(client, messages, route="capped", max_image_bytes=10**12)
    assert out["summary"]["included"] == 600 // each
    out = await render(client, messages, route="capped", max_image_bytes=each)
    assert out["summary"]["included"] == 1


async def test_without_a_route_budget_a_request_gets_at_most_the_default(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs = await stored(client, *(png(8, 8, seed=i) for i in range(4)))
    each = len(base64.b64encode(png(8, 8)))
    monkeypatch.setattr(plan, "DEFAULT_BUDGET", 2 * each)
    messages = [{"role": "user", "content": [image(r) for r in refs]}]
    for route in ("vision", None):
        fields = {"provider": "openai-chat", "max_image_bytes": 10**12} | ({"route": route} if route else {})
        out = await render(client, messages, **fields)
        assert out["summary"]["included"] == 2
        assert out["summary"]["base64_bytes"] == 2 * each


async def test_a_repeated_ref_is_read_and_encoded_once(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = png(30, 20), png(20, 30)
    ref_a, ref_b = await stored(client, a, b)
    encoded: list[int] = []
    real = render_api._encode

    def counting(data: bytes) -> bytes:
        encoded.append(len(data))
        return real(data)

    monkeypatch.setattr(render_api, "_encode", counting)
    request = {
        "route": "vision",
        "messages": [
            {"role": "user", "content": [image(ref_a)] * 20 + [image(ref_b)]},
            {"role": "tool", "tool_call_id": "c", "content": [image(ref_a)] * 20},
        ],
    }
    response = await post_json(client, "/v1/render", request)
    assert response.status == 200
    body = await response.read()
    assert sorted(encoded) == sorted([len(a), len(b)])
    rendered = await render_in_process(client.app[STORE], msgspec.convert(request, RenderRequest))
    assert body == msgspec.json.encode(rendered)
    assert rendered.summary.included == 41
    # An embedder's body shares one string among the occurrences of a ref.
    urls = [
        p["image_url"]["url"] for m in rendered.body["messages"] for p in m["content"] if "image_url" in p
    ]
    assert len(urls) == 41
    assert len({id(url) for url in urls}) == 2


async def test_the_default_embed_encodes_off_the_loop_and_any_other_is_called_on_it(client: Client) -> None:
    refs = await stored(client, png(6, 6, seed=1), png(6, 6, seed=2))
    request = msgspec.convert(
        {"route": "vision", "messages": [{"role": "user", "content": [image(r) for r in refs]}]},
        RenderRequest,
    )
    loop = threading.get_ident()
    called: list[bool] = []

    def on_loop(prefix: str, image: Image) -> str:
        called.append(threading.get_ident() == loop)
        return prefix + base64.b64encode(image.data).decode()

    marked = await render_in_process(client.app[STORE], request, embed=on_loop)
    assert called == [True, True]

    def default(prefix: str, image: Image) -> str:
        called.append(threading.get_ident() == loop)
        return providers.as_text(prefix, image)

    called.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(assemble, "as_text", default)
        plain = await render_in_process(client.app[STORE], request, embed=default)
    assert called == [False, False]
    assert plain == marked


async def test_render_claims_the_bytes_it_reads_before_reading_them(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = [png(40, 40, seed=i) for i in range(3)]
    refs = await stored(client, *images)
    store = client.app[STORE]
    events: list[Any] = []
    real = store.verified_many

    async def recording(wanted: Any, *rest: Any) -> Any:
        events.extend(("read", str(ref)) for ref, _ in wanted)
        return await real(wanted, *rest)

    monkeypatch.setattr(store, "verified_many", recording)
    each = len(base64.b64encode(images[0]))
    request = RenderRequest(
        messages=msgspec.convert([{"role": "user", "content": [image(r) for r in refs]}], list[MessageIn]),
        route="vision",
        max_image_bytes=2 * each,
    )
    await render_in_process(store, request, claim=lambda n: events.append(("claim", n)))
    assert events[0] == ("claim", len(images[1]) + len(images[2]))
    assert sorted(events[1:]) == sorted(("read", r) for r in refs[1:])

    def refuse(n: int) -> None:
        raise ServerBusy("no room")

    events.clear()
    with pytest.raises(ServerBusy):
        await render_in_process(store, request, claim=refuse)
    assert events == []


async def test_one_corrupt_object_in_ten_images(client: Client) -> None:
    refs = await stored(client, *(png(9, 9, seed=i) for i in range(10)))
    corrupt_all(client.app[STORE], [refs[4]])
    messages = [{"role": "user", "content": [text(str(i)), image(r)]} for i, r in enumerate(refs)]
    out = await render(client, messages, route="vision")
    assert out["summary"]["included"] == 9
    assert out["summary"]["unavailable"] == 1
    assert image_urls(out["body"]["messages"][4]) == []
    assert texts(out["body"]["messages"][4])[1].startswith("[image unavailable")


async def test_unknown_refs_are_unavailable_and_malformed_refs_are_errors(client: Client) -> None:
    out = await render(client, [{"role": "user", "content": [image("sha256:" + "0" * 64)]}], route="vision")
    assert out["summary"]["unavailable"] == 1
    response = await post_json(
        client, "/v1/render", {"route": "vision", "messages": [{"role": "user", "content": [image("x")]}]}
    )
    assert (response.status, (await error_of(response))["code"]) == (400, "INVALID_ATTACHMENT_REF")


@pytest.mark.parametrize("role", ["system", "assistant"])
async def test_images_in_system_or_assistant_messages(client: Client, role: str) -> None:
    [ref] = await stored(client, png(4, 4))
    response = await post_json(
        client, "/v1/render", {"route": "vision", "messages": [{"role": role, "content": [image(ref)]}]}
    )
    error = await error_of(response)
    assert (response.status, error["code"]) == (422, "UNSUPPORTED_CONTENT")
    assert "$.messages[0]" in error["message"]


async def test_request_errors_name_the_path(client: Client) -> None:
    cases = [
        ({"messages": [{"role": "user", "content": "hi"}]}, "$.provider"),
        ({"provider": "openai-chat", "messages": [{"role": "robot"}]}, "$.messages[0].role"),
        (
            {"provider": "openai-chat", "messages": [{"role": "tool", "content": "x"}]},
            "$.messages[0].tool_call_id",
        ),
        (
            {"provider": "openai-chat", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "$.messages[0].content[0]",
        ),
    ]
    for body, path in cases:
        response = await post_json(client, "/v1/render", body)
        error = await error_of(response)
        assert (response.status, error["code"]) == (400, "INVALID_REQUEST"), body
        assert path in error["message"], (path, error["message"])


async def test_the_sessions_route_is_the_default(client: Client) -> None:
    assert (await client.put("/v1/sessions/s", json={"route": "texty"})).status == 201
    [ref] = await stored(client, png(4, 4))
    out = await render(client, [{"role": "user", "content": [image(ref)]}], session="s")
    assert out["provider"] == "anthropic"
    assert out["summary"]["omitted"] == 1


async def test_parallel_tool_results_for_openai_chat(client: Client) -> None:
    refs = await stored(client, png(4, 4), png(5, 5))
    messages = [
        {"role": "user", "content": "compare the two files"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "name": "read_image", "arguments": {"path": "a.png"}},
                {"id": "c2", "name": "read_image", "arguments": {"path": "b.png"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [image(refs[0])]},
        {"role": "tool", "tool_call_id": "c2", "content": [text("b.png, 5x5"), image(refs[1])]},
    ]
    out = await render(client, messages, route="vision")
    roles = [m["role"] for m in out["body"]["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "user"]
    assert out["body"]["messages"][2]["content"] == "(see attached image)"
    assert out["body"]["messages"][3]["content"] == "b.png, 5x5"
    synthetic = out["body"]["messages"][4]
    assert texts(synthetic) == ["Attached image(s) from tool result:"]
    assert len(image_urls(synthetic)) == 2


def test_token_formulas() -> None:
    # OpenAI's worked examples: 1024x1024 high is 765, 2048x4096 high is 1105, low detail is 85.
    assert tokens.openai(1024, 1024, "high") == 765
    assert tokens.openai(2048, 4096, None) == 1105
    assert tokens.openai(4000, 3000, "low") == 85
    # Anthropic: 1092x1092 is about 1590; a long edge over 1568 is scaled down first.
    assert tokens.anthropic(1092, 1092) == 1590
    assert tokens.anthropic(3136, 1568) == tokens.anthropic(1568, 784)
    # Gemini: 258 up to 384x384, else 258 per 768x768 tile.
    assert tokens.gemini(384, 384) == 258
    assert tokens.gemini(1000, 700) == 516


async def test_an_image_that_fails_its_read_gives_its_budget_back(client: Client) -> None:
    images = [png(40, 40, seed=10 + i) for i in range(3)]
    refs = await stored(client, *images)
    each = len(base64.b64encode(images[0]))
    corrupt_all(client.app[STORE], [refs[2]])  # the newest
    messages = [{"role": "user", "content": [image(r)]} for r in refs]
    out = await render(client, messages, route="vision", max_image_bytes=2 * each)
    assert out["summary"] == {**out["summary"], "included": 2, "omitted": 0, "unavailable": 1}
    assert [len(image_urls(m)) for m in out["body"]["messages"]] == [1, 1, 0]


async def test_an_empty_conversation_is_a_bad_request(client: Client) -> None:
    response = await post_json(client, "/v1/render", {"route": "vision", "messages": []})
    assert (response.status, (await error_of(response))["code"]) == (400, "INVALID_REQUEST")


def with_arguments(levels: int) -> list[dict[str, Any]]:
    """A conversation whose one tool call has arguments nested `levels` deep."""
    arguments: Any = 1
    for _ in range(levels):
        arguments = {"a": arguments}
    call = {"id": "c1", "name": "f", "arguments": arguments}
    return [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]


@pytest.mark.parametrize("provider", ["openai-chat", "anthropic", "gemini"])
async def test_tool_call_arguments_nest_at_most_so_deep(client: Client, provider: str) -> None:
    fine = await post_json(
        client, "/v1/render", {"provider": provider, "messages": with_arguments(MAX_NESTING)}
    )
    assert fine.status == 200
    deep = {"provider": provider, "messages": with_arguments(MAX_NESTING + 1)}
    refused = await post_json(client, "/v1/render", deep)
    error = await error_of(refused)
    # Arguments some 940 levels deep were decoded, then failed in the answer's encoder: a 500.
    assert (refused.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "$.messages[1].tool_calls[0].arguments: nested more than 64 levels deep" in error["message"]


async def test_json_too_deep_to_decode_is_a_bad_request(client: Client) -> None:
    levels = 100_000
    body = (
        '{"provider": "anthropic", "messages": [{"role": "assistant", "content": "", "tool_calls": '
        '[{"id": "1", "name": "f", "arguments": ' + '{"a":' * levels + "1" + "}" * levels + "}]}]}"
    )
    headers = {"Content-Type": "application/json"}
    response = await client.post("/v1/render", data=io.BytesIO(body.encode()), headers=headers)
    error = await error_of(response)
    assert (response.status, error["code"]) == (400, "INVALID_REQUEST")  # it was a 500 from the decoder
    assert "nested too deeply" in error["message"]


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses", "anthropic", "gemini"])
async def test_the_answer_is_the_json_of_the_python_render(client: Client, provider: str) -> None:
    """The daemon writes the base64 from the buffers it was encoded into; the bytes must be those of the
    render an embedder gets, encoded as JSON, whatever the texts around the images hold."""
    refs = await stored(client, png(30, 20), jpeg(16, 16), png(3, 3, seed=2))
    corrupt_all(client.app[STORE], [refs[2]])
    odd = 'NUL \x00, quote ", backslash \\, newline \n, é, 😀, </script>'
    request = {
        "provider": provider,
        "messages": [
            {"role": "system", "content": odd},
            {"role": "user", "content": [text(odd), image(refs[0], detail="low"), image(refs[1])]},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "read_image", "arguments": {"path": odd}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [image(refs[1]), image(refs[2], path=odd)]},
            {"role": "user", "content": [image(refs[0])]},
        ],
    }
    response = await post_json(client, "/v1/render", request)
    assert response.status == 200
    body = await response.read()
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Content-Length"] == str(len(body))
    rendered = await render_in_process(client.app[STORE], msgspec.convert(request, RenderRequest))
    assert body == msgspec.json.encode(rendered)
    assert rendered.summary.included == 4
    assert rendered.summary.unavailable == 1
    assert b"\x00" not in body
    # The embedder's body holds plain JSON values, its images' base64 in strings.
    assert all(isinstance(leaf, str | int | None) for leaf in _leaves(rendered.body))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


async def test_an_answer_without_images(client: Client) -> None:
    request = {"provider": "gemini", "messages": [{"role": "user", "content": "hi"}]}
    response = await post_json(client, "/v1/render", request)
    rendered = await render_in_process(client.app[STORE], msgspec.convert(request, RenderRequest))
    assert await response.read() == msgspec.json.encode(rendered)


class _Writer:
    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    async def write(self, chunk: bytes | memoryview) -> None:
        self.pieces.append(bytes(chunk))


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses", "anthropic", "gemini"])
async def test_the_answer_payload_matches_the_encoder_for_every_length(provider: str) -> None:
    """Sizes 0 to 7 cover every amount of base64 padding; the declared size is the Content-Length."""
    images = [Image("image/png", bytes(range(n)), "low" if n % 2 else None) for n in range(8)]
    turns = [
        Turn("system", [Text("s\x00")]),
        Turn("user", [Text("a"), *images[:4]]),
        Turn("tool", images[4:], tool_call_id="c1"),
        Turn("user", [Text("")]),
    ]
    summary = Summary(8, 0, 0, 0, 0)
    expected = msgspec.json.encode(Rendered(provider, render_body(provider, turns), summary))
    answer = Answer(Rendered(provider, render_body(provider, turns, ImageSlot), summary))
    writer = _Writer()
    await answer.write(writer)  # type: ignore[arg-type]
    assert b"".join(writer.pieces) == expected
    assert answer.size == len(expected)
    assert answer.decode() == expected.decode()


def test_msgspec_writes_bytes_as_the_standard_librarys_base64() -> None:
    """The daemon's answer and the embedder's body encode the same bytes with these two."""
    for n in [*range(70), 1000, 4097]:
        data = bytes((i * 7 + n) % 256 for i in range(n))
        assert msgspec.json.encode(data) == b'"' + base64.b64encode(data) + b'"'
