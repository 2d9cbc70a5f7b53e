"""POST /v1/mcp/results through the real HTTP app: a CallToolResult in, its images admitted as one `mcp`
batch, the same result out with each image a ref (docs/api.md)."""

from __future__ import annotations

import copy
import hashlib
import textwrap
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from attachstore.api.common import STORE
from tests.conftest import MakeClient
from tests.service.test_tenants import TENANTS, admit_as, auth
from tests.support import images
from tests.support.http import b64, error_of, post_json

Client = TestClient[Any, Any]
ROUTES = {
    "vision": {"input_modalities": ["text", "image"], "provider": "anthropic"},
    "text-only": {"input_modalities": ["text"]},
}
RED, BLUE = images.png(12, 9), images.jpeg(30, 20)


def ref_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def wrapped(data: bytes) -> str:
    """Base64 as MIME writes it: lines of 76 characters, ended by CRLF."""
    return "\r\n".join(textwrap.wrap(b64(data), 76)) + "\r\n"


def a_result() -> dict[str, Any]:
    """What a screenshot server might answer: text, an image, an embedded image resource, a text resource, a
    link, audio, structured content, _meta and a field of a newer protocol."""
    return {
        "content": [
            {"type": "text", "text": "Two screenshots:", "annotations": {"audience": ["user"]}},
            {"type": "image", "data": wrapped(RED), "mimeType": "image/png", "_meta": {"k": 1}},
            {
                "type": "resource",
                "resource": {
                    "uri": "file:///tmp/shots/blue.jpg",
                    "mimeType": "image/jpeg",
                    "blob": b64(BLUE),
                },
            },
            {
                "type": "resource",
                "resource": {"uri": "file:///tmp/log.txt", "mimeType": "text/plain", "text": "done"},
            },
            {
                "type": "resource",
                "resource": {
                    "uri": "file:///tmp/a.bin",
                    "mimeType": "application/pdf",
                    "blob": b64(images.PDF),
                },
            },
            {
                "type": "resource_link",
                "uri": "file:///tmp/shots/",
                "name": "shots",
                "mimeType": "inode/directory",
            },
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        ],
        "structuredContent": {"count": 2, "nested": {"deep": [1, 2, {"x": None}]}},
        "isError": False,
        "_meta": {"progressToken": 7},
        "someFutureField": {"kept": True},
    }


async def results(client: Client, body: Any, query: str = "", **headers: str) -> tuple[int, Any]:
    answer = await client.post(f"/v1/mcp/results{query}", json=body, headers=headers)
    return answer.status, await answer.json()


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client(routes=ROUTES)


async def test_images_become_refs_and_everything_else_stays(client: Client) -> None:
    sent = a_result()
    status, answer = await results(client, {"result": copy.deepcopy(sent), "route": "vision"})
    assert status == 201, answer
    out = answer["result"]
    expected = copy.deepcopy(sent)
    expected["content"][1] = {"type": "image", "ref": ref_of(RED)}
    expected["content"][2] = {"type": "image", "ref": ref_of(BLUE)}
    assert out == expected  # the same keys in the same order, every other block and field as it came
    assert list(out) == list(sent)
    assert [a["ref"] for a in answer["attachments"]] == [ref_of(RED), ref_of(BLUE)]
    assert [a["name"] for a in answer["attachments"]] == [None, "blue.jpg"]  # a resource is named by its uri
    assert "degraded" not in answer
    # Admitted and readable, verified: the line breaks were taken out before the strict base64 check.
    read = await client.get(f"/v1/attachments/{ref_of(RED)}")
    assert await read.read() == RED


async def test_the_answer_renders_as_it_is(client: Client) -> None:
    status, answer = await results(
        client,
        {
            "result": {
                "content": [
                    {"type": "text", "text": "the chart"},
                    {"type": "image", "data": b64(RED), "mimeType": "image/png"},
                ]
            },
            "route": "vision",
        },
    )
    assert status == 201
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "screenshot"}]},
        {"role": "tool", "tool_call_id": "c1", "name": "screenshot", "content": answer["result"]["content"]},
    ]
    rendered = await post_json(client, "/v1/render", {"route": "vision", "messages": messages})
    assert rendered.status == 200, await rendered.text()
    body = await rendered.json()
    assert body["summary"]["included"] == 1
    [tool_result] = body["body"]["messages"][1]["content"]
    assert tool_result["content"][1]["source"]["data"] == b64(RED)


async def test_the_bare_form_takes_route_and_session_from_the_query(client: Client) -> None:
    assert (await client.put("/v1/sessions/s1", json={"route": "vision"})).status == 201
    sent = {"content": [{"type": "image", "data": b64(RED), "mimeType": "image/png"}]}
    status, answer = await results(client, sent, "?session=s1")  # the session's route
    assert status == 201, answer
    assert answer["result"] == {"content": [{"type": "image", "ref": ref_of(RED)}]}
    session = await (await client.get("/v1/sessions/s1")).json()
    assert session["holds"] == [ref_of(RED)]
    status, answer = await results(client, sent, "?route=vision")
    assert status == 201


async def test_a_refusal_is_the_text_for_the_model_and_still_200(client: Client) -> None:
    sent = a_result()
    status, answer = await results(client, {"result": sent, "route": "text-only"})
    assert status == 200
    assert answer["degraded"] is True
    assert answer["attachments"] == []
    assert [d["code"] for d in answer["diagnostics"]] == ["MODALITY_UNSUPPORTED"] * 2
    content = answer["result"]["content"]
    # The first image's place holds the text; the other image is gone; everything else as it came.
    assert content[1] == {"type": "text", "text": answer["text"]}
    assert "does not accept images" in answer["text"]
    assert len(content) == len(sent["content"]) - 1
    assert content[2:] == a_result()["content"][3:]
    assert answer["result"]["structuredContent"] == sent["structuredContent"]
    assert (await client.get(f"/v1/attachments/{ref_of(RED)}")).status == 404  # nothing stored


async def test_one_bad_image_refuses_the_batch_with_a_diagnostic_each(client: Client) -> None:
    sent = {
        "content": [
            {"type": "image", "data": b64(RED), "mimeType": "image/png"},
            {"type": "image", "data": b64(images.truncate(BLUE, 60)), "mimeType": "image/jpeg"},
            {
                "type": "image",
                "data": b64(RED) + " ",
                "mimeType": "image/png",
            },  # only line breaks are taken out
        ]
    }
    status, answer = await results(client, sent, "?route=vision")
    assert status == 200
    assert [d["code"] for d in answer["diagnostics"]] == [None, "INVALID_IMAGE", "INVALID_IMAGE_BASE64"]
    assert answer["result"]["content"] == [{"type": "text", "text": answer["text"]}]
    assert "Image 2" in answer["text"]
    assert "Image 3" in answer["text"]


async def test_no_route_that_takes_images_is_a_refusal(client: Client) -> None:
    sent = {"content": [{"type": "image", "data": b64(RED), "mimeType": "image/png"}]}
    status, answer = await results(client, sent)
    assert (status, answer["diagnostics"][0]["code"]) == (200, "MODALITY_UNSUPPORTED")


async def test_a_result_without_images_comes_back_as_it_came(client: Client) -> None:
    sent = {"content": [{"type": "text", "text": "nothing to see"}], "isError": True}
    assert await results(client, sent, "?route=vision") == (200, {"result": sent, "attachments": []})
    assert await results(client, {"content": []}) == (200, {"result": {"content": []}, "attachments": []})


async def test_blocks_not_looked_at_come_back_as_they_came(client: Client) -> None:
    sent = {
        "content": [
            {"type": "text", "text": 7, "annotations": [1]},  # not MCP's shape, and none of our business
            {"type": "video/future", "frames": [1, 2]},
            {"type": "resource", "resource": {"mimeType": "image/png", "text": "no blob"}, "_meta": None},
        ],
        "unknown": {"x": [None]},
    }
    status, answer = await results(client, copy.deepcopy(sent), "?route=vision")
    assert (status, answer["result"]) == (200, sent)


async def test_embedded_resources_are_admitted_only_with_an_image_type(client: Client) -> None:
    sent = {
        "content": [
            {"type": "resource", "resource": {"uri": "x:1", "blob": b64(RED)}},  # no type: not looked at
            {"type": "resource", "resource": {"uri": "x:2", "mimeType": "Image/PNG", "blob": b64(RED)}},
            {"type": "resource", "resource": {"uri": "x:3", "mimeType": "image/png", "text": "an SVG, say"}},
        ]
    }
    status, answer = await results(client, copy.deepcopy(sent), "?route=vision")
    assert status == 201
    assert answer["result"]["content"] == [
        sent["content"][0],
        {"type": "image", "ref": ref_of(RED)},
        sent["content"][2],
    ]


async def test_an_svg_resource_is_refused_with_the_batch(client: Client) -> None:
    sent = {
        "content": [
            {"type": "image", "data": b64(RED), "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {"uri": "x.svg", "mimeType": "image/svg+xml", "blob": b64(images.SVG)},
            },
        ]
    }
    status, answer = await results(client, sent, "?route=vision")
    assert status == 200
    assert [d["code"] for d in answer["diagnostics"]] == [None, "UNSUPPORTED_IMAGE_TYPE"]


async def test_the_same_image_twice_is_stored_once_and_answered_twice(client: Client) -> None:
    block = {"type": "image", "data": b64(RED), "mimeType": "image/png"}
    status, answer = await results(client, {"content": [block, block]}, "?route=vision")
    assert status == 201
    assert answer["result"]["content"] == [{"type": "image", "ref": ref_of(RED)}] * 2


async def test_too_many_images_for_a_batch_is_a_refusal(client: Client) -> None:
    block = {"type": "image", "data": b64(RED), "mimeType": "image/png"}
    status, answer = await results(client, {"content": [block] * 17}, "?route=vision")
    assert (status, answer["diagnostics"][0]["code"]) == (200, "TOO_MANY_IMAGES")
    assert answer["result"]["content"] == [{"type": "text", "text": answer["text"]}]


@pytest.mark.parametrize(
    ("body", "query", "where"),
    [
        ([], "", "$"),
        ({"content": "no"}, "", "$.content"),
        ({"content": [], "isError": "yes"}, "", "$.isError"),
        ({"content": [], "isError": None}, "", "$.isError"),
        ({"content": [], "structuredContent": [1]}, "", "$.structuredContent"),
        ({"result": {"content": [], "_meta": 1}}, "", "$.result._meta"),
        ({"isError": True}, "", "$.content"),
        ({"content": [7]}, "", "$.content[0]"),
        ({"content": [{"text": "no type"}]}, "", "$.content[0]"),
        ({"content": [{"type": "image", "mimeType": "image/png"}]}, "", "$.content[0].data"),
        ({"content": [{"type": "image", "data": 7}]}, "", "$.content[0].data"),
        ({"content": [{"type": "image", "data": "", "mimeType": 5}]}, "", "$.content[0].mimeType"),
        ({"content": [{"type": "resource", "resource": "x"}]}, "", "$.content[0].resource"),
        (
            {"content": [{"type": "resource", "resource": {"mimeType": "image/png", "blob": 1}}]},
            "",
            "$.content[0].resource.blob",
        ),
        ({"result": {"content": [{"type": "image"}]}}, "", "$.result.content[0].data"),
        ({"result": {"content": []}, "route": ""}, "", "$.route"),
        ({"result": {"content": []}, "extra": 1}, "", "unknown field `extra`"),
        ({"result": {"content": []}, "route": "vision"}, "?route=vision", "give it once"),
        ({"content": []}, "?session=a%20b", "session"),
        ({"content": []}, "?model=x", "'model'"),
        ({"content": []}, "?route=a&route=b", "more than once"),
        ({"content": [{"type": "text", "text": "x"}] * 1025}, "", "more than 1024"),
    ],
)
async def test_a_malformed_body_is_400_naming_where(
    client: Client, body: Any, query: str, where: str
) -> None:
    answer = await post_json(client, f"/v1/mcp/results{query}", body)
    error = await error_of(answer)
    assert (answer.status, error["code"]) == (400, "INVALID_REQUEST"), error
    assert where in error["message"]


async def test_nesting_is_bounded(client: Client) -> None:
    deep: Any = 1
    for _ in range(70):
        deep = {"d": deep}
    answer = await post_json(client, "/v1/mcp/results", {"content": [], "structuredContent": deep})
    error = await error_of(answer)
    assert (answer.status, error["code"]) == (400, "INVALID_REQUEST")
    assert "nested more than 64 levels" in error["message"]


async def test_not_json_is_415_and_an_unknown_session_404(client: Client) -> None:
    answer = await client.post("/v1/mcp/results", data=b"{}", headers={"Content-Type": "text/plain"})
    assert (answer.status, (await error_of(answer))["code"]) == (415, "UNSUPPORTED_MEDIA_TYPE")
    sent = {"content": [{"type": "image", "data": b64(RED), "mimeType": "image/png"}]}
    answer = await post_json(client, "/v1/mcp/results?session=nope", sent)
    assert (answer.status, (await error_of(answer))["code"]) == (404, "SESSION_NOT_FOUND")


async def test_the_body_is_capped_and_counted_as_an_admissions(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES, http={"max_body_bytes": 4096})
    sent = {"content": [{"type": "image", "data": b64(images.png(64, 64)), "mimeType": "image/png"}]}
    answer = await post_json(client, "/v1/mcp/results?route=vision", sent)
    assert (answer.status, (await error_of(answer))["code"]) == (413, "PAYLOAD_TOO_LARGE")

    # The place is an admission's: with every place taken, 503 before the body is read.
    busy = await make_client(routes=ROUTES, admission={"max_concurrent": 1})
    with busy.app[STORE].admission_slot(""):
        answer = await post_json(busy, "/v1/mcp/results", {"content": []})
        assert (answer.status, (await error_of(answer))["code"]) == (503, "SERVER_BUSY")


async def test_the_body_counts_against_the_bytes_admissions_hold(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES, admission={"max_buffered_bytes": 10_000})
    sent = {"content": [{"type": "image", "data": b64(images.png(40, 40)), "mimeType": "image/png"}]}
    with client.app[STORE].admission_slot("") as other:
        other.hold(5_000)  # another admission in progress holds half the budget
        answer = await post_json(client, "/v1/mcp/results?route=vision", sent)
        assert (answer.status, (await error_of(answer))["code"]) == (503, "SERVER_BUSY")
    assert (await post_json(client, "/v1/mcp/results?route=vision", sent)).status == 201


async def test_images_land_in_the_callers_tenant(make_client: MakeClient) -> None:
    client = await make_client(routes=ROUTES, tenants=TENANTS)
    sent = {"content": [{"type": "image", "data": b64(RED), "mimeType": "image/png"}]}
    status, answer = await results(client, sent, "?route=vision", **auth("alpha"))
    assert status == 201, answer
    assert (await client.get(f"/v1/attachments/{ref_of(RED)}", headers=auth("alpha"))).status == 200
    assert (await client.get(f"/v1/attachments/{ref_of(RED)}", headers=auth("beta"))).status == 404
    assert await admit_as(client, "beta", RED) == ref_of(RED)
