"""Sessions, holds, routes and the modality policy, through the real app."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from attachstore.api.common import STORE
from attachstore.refs import Ref
from tests.conftest import MakeClient
from tests.support.http import admit, error_of, object_path, post_json
from tests.support.images import gif, jpeg, png

Client = TestClient[Any, Any]
ROUTES = {
    "vision": {"input_modalities": ["text", "image"], "provider": "openai-chat"},
    "texty": {"input_modalities": ["text"]},
    "plain": {},  # declared without modalities: text only
}


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client(routes=ROUTES)


async def put_session(client: Client, sid: str, route: str | None = "vision") -> Any:
    return await client.put(f"/v1/sessions/{sid}", json={"route": route})


async def session_of(client: Client, sid: str) -> dict[str, Any]:
    response = await client.get(f"/v1/sessions/{sid}")
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def admitted(client: Client, *images: bytes, **fields: Any) -> list[str]:
    response = await admit(client, *images, **fields)
    assert response.status == 201, await response.text()
    return [a["ref"] for a in (await response.json())["attachments"]]


# -- the policy, cell by cell ------------------------------------------------------------------------------

ACCEPTED, HARD, SOFT = "accepted", "hard", "soft"
# gpt-4o-mini and deepseek-reasoner are not configured: the built-in catalog declares them.
_KNOWN = {"vision": ACCEPTED, "gpt-4o-mini": ACCEPTED}
POLICY = {
    "user": {**_KNOWN, "texty": HARD, "deepseek-reasoner": HARD, "unknown-model": ACCEPTED, None: ACCEPTED},
    "command": {
        **_KNOWN,
        "texty": HARD,
        "deepseek-reasoner": HARD,
        "unknown-model": ACCEPTED,
        None: ACCEPTED,
    },
    "tool": {**_KNOWN, "texty": SOFT, "deepseek-reasoner": SOFT, "unknown-model": SOFT, None: SOFT},
    "mcp": {**_KNOWN, "texty": SOFT, "deepseek-reasoner": SOFT, "unknown-model": SOFT, None: SOFT},
}


@pytest.mark.parametrize("source", list(POLICY))
@pytest.mark.parametrize(
    "route", ["vision", "gpt-4o-mini", "texty", "deepseek-reasoner", "unknown-model", None]
)
async def test_modality_policy(client: Client, source: str, route: str | None) -> None:
    image = png(6, 6)
    fields = {} if route is None else {"route": route}
    response = await admit(client, image, source=source, **fields)
    expected = POLICY[source][route]
    ref = str(Ref.of("sha256", image))
    if expected == ACCEPTED:
        assert response.status == 201
        assert (await client.get(f"/v1/attachments/{ref}")).status == 200
        return
    if expected == HARD:
        error = await error_of(response)
        assert (response.status, error["code"]) == (422, "MODALITY_UNSUPPORTED")
        assert "index" not in error  # a batch-level decision
    else:
        body = await response.json()
        assert response.status == 200
        assert (body["attachments"], body["degraded"]) == ([], True)
        assert [d["code"] for d in body["diagnostics"]] == ["MODALITY_UNSUPPORTED"]
        assert "none" in body["text"] or "not attached" in body["text"]
    assert (await client.get(f"/v1/attachments/{ref}")).status == 404


async def test_the_route_defaults_to_the_sessions(client: Client) -> None:
    assert (await put_session(client, "s-none", None)).status == 201
    tool = await (await admit(client, png(4, 4), source="tool", session="s-none")).json()
    assert tool["degraded"] is True  # no route anywhere: a tool image cannot be shown to be seen
    assert (await admit(client, png(4, 4), source="tool", session="s-none", route="vision")).status == 201
    assert (await put_session(client, "s-text", "texty")).status == 201
    response = await admit(client, png(4, 4), session="s-text")
    assert (await error_of(response))["code"] == "MODALITY_UNSUPPORTED"


async def test_no_image_enters_a_text_only_session(client: Client) -> None:
    # Naming a vision route in the request does not get images into a session whose model cannot see them:
    # the switch guard would otherwise be bypassed.
    [ref] = await admitted(client, png(4, 5))
    await put_session(client, "s-text", "texty")
    response = await admit(client, png(4, 4), session="s-text", route="vision")
    assert (response.status, (await error_of(response))["code"]) == (422, "MODALITY_UNSUPPORTED")
    soft = await (await admit(client, png(4, 4), source="tool", session="s-text", route="vision")).json()
    assert soft["diagnostics"][0]["code"] == "MODALITY_UNSUPPORTED"
    held = await client.post("/v1/sessions/s-text/holds", json={"refs": [ref]})
    assert (held.status, (await error_of(held))["code"]) == (422, "MODALITY_UNSUPPORTED")
    assert (await session_of(client, "s-text"))["holds"] == []


@pytest.mark.parametrize("source", ["user", "tool"])
async def test_an_empty_batch_is_a_bad_request(client: Client, source: str) -> None:
    response = await post_json(client, "/v1/attachments", {"source": source, "images": []})
    assert (response.status, (await error_of(response))["code"]) == (400, "INVALID_REQUEST")


async def test_a_tools_mixed_batch_degrades_whole_and_stores_nothing(make_client: MakeClient) -> None:
    client = await make_client(
        routes=ROUTES, limits={"max_image_bytes": 2000}, admission={"oversize": "reject"}
    )
    small, big = png(4, 4), png(40, 40)
    assert len(small) <= 2000 < len(big)
    response = await admit(client, small, big, source="tool", route="vision", name="shot.png")
    assert response.status == 200
    body = await response.json()
    assert body["attachments"] == []
    assert body["degraded"] is True
    first, second = body["diagnostics"]
    assert (first["index"], first["code"], first["media_type"]) == (0, None, "image/png")
    assert (second["index"], second["code"]) == (1, "IMAGE_TOO_LARGE")
    assert "2,000" in second["hint"]
    assert "2,000" in body["text"]
    assert "read it again" in body["text"]
    for image in (small, big):
        assert (await client.get(f"/v1/attachments/{Ref.of('sha256', image)}")).status == 404


async def test_the_same_batch_from_a_user_is_a_hard_422(make_client: MakeClient, data_dir: Path) -> None:
    client = await make_client(
        routes=ROUTES, limits={"max_image_bytes": 2000}, admission={"oversize": "reject"}
    )
    small, big = png(4, 4), png(40, 40)
    response = await admit(client, small, big, source="user", route="vision")
    error = await error_of(response)
    assert (response.status, error["code"], error["index"]) == (422, "IMAGE_TOO_LARGE", 1)
    assert "attach it again" in error["hint"]  # a person attached it; nothing can read it again
    assert not object_path(data_dir, str(Ref.of("sha256", small))).exists()


async def test_an_mcp_result_with_a_broken_image_degrades(client: Client) -> None:
    response = await admit(client, jpeg(10, 10)[:-30], source="mcp", route="vision")
    body = await response.json()
    assert response.status == 200
    assert body["diagnostics"][0]["code"] == "INVALID_IMAGE"
    assert body["text"].startswith("The tool result contained an image, but it was not attached")


async def test_a_malformed_tool_request_is_still_a_hard_error(client: Client) -> None:
    response = await post_json(client, "/v1/attachments", {"source": "tool", "images": [{"data": 1}]})
    assert response.status == 400


# -- the session lifecycle --------------------------------------------------------------------------------


async def test_create_is_idempotent_and_conflicts_on_another_route(client: Client) -> None:
    first = await put_session(client, "s-1")
    assert first.status == 201
    body = await first.json()
    assert (body["session"], body["route"], body["holds"]) == ("s-1", "vision", [])
    assert body["created"].endswith("Z")
    again = await put_session(client, "s-1")
    assert again.status == 200
    assert await again.json() == body
    other = await put_session(client, "s-1", "texty")
    assert (other.status, (await error_of(other))["code"]) == (409, "SESSION_CONFLICT")


@pytest.mark.parametrize("sid", ["a/b", "x" * 129, "sp ace", "é"])
async def test_bad_session_ids(client: Client, sid: str) -> None:
    response = await client.put(f"/v1/sessions/{sid}", json={"route": "vision"})
    assert response.status in (400, 404)
    assert (await error_of(response))["code"] in ("INVALID_REQUEST", "NOT_FOUND")


async def test_unknown_session(client: Client) -> None:
    for response in [
        await client.get("/v1/sessions/nope"),
        await client.delete("/v1/sessions/nope"),
        await client.post("/v1/sessions/nope/fork", json={"session": "x"}),
        await client.post("/v1/sessions/nope/route", json={"route": "vision"}),
        await client.post("/v1/sessions/nope/holds", json={"refs": []}),
    ]:
        assert (response.status, (await error_of(response))["code"]) == (404, "SESSION_NOT_FOUND")


async def test_admitting_into_an_unknown_session_stores_nothing(client: Client, data_dir: Path) -> None:
    image = png(7, 7)
    response = await admit(client, image, session="ghost")
    assert (response.status, (await error_of(response))["code"]) == (404, "SESSION_NOT_FOUND")
    assert not object_path(data_dir, str(Ref.of("sha256", image))).exists()


async def test_admission_holds_in_input_order(client: Client) -> None:
    await put_session(client, "s-1")
    refs = await admitted(client, png(3, 3), gif(5, 5), png(3, 3), session="s-1")
    assert refs[0] == refs[2]
    assert (await session_of(client, "s-1"))["holds"] == [refs[0], refs[1]]


async def test_fork_then_delete_keeps_the_fork_whole(client: Client) -> None:
    await put_session(client, "orig")
    refs = await admitted(client, png(8, 8), jpeg(9, 9), session="orig")
    fork = await client.post("/v1/sessions/orig/fork", json={"session": "fork"})
    assert fork.status == 201
    assert (await fork.json())["holds"] == refs
    again = await client.post("/v1/sessions/orig/fork", json={"session": "fork"})
    assert (again.status, (await error_of(again))["code"]) == (409, "SESSION_CONFLICT")

    deleted = await client.delete("/v1/sessions/orig")
    assert await deleted.json() == {"session": "orig", "released": 2}
    assert (await client.get("/v1/sessions/orig")).status == 404
    forked = await session_of(client, "fork")
    assert (forked["holds"], forked["route"]) == (refs, "vision")
    for ref in refs:
        assert (await client.get(f"/v1/attachments/{ref}")).status == 200

    await client.delete("/v1/sessions/fork")
    assert (await client.get("/v1/sessions/fork")).status == 404
    # Released, not deleted: the objects stay until garbage collection.
    for ref in refs:
        assert (await client.get(f"/v1/attachments/{ref}")).status == 200


async def test_the_switch_guard(client: Client) -> None:
    await put_session(client, "empty")
    ok = await client.post("/v1/sessions/empty/route", json={"route": "texty"})
    assert (ok.status, (await ok.json())["route"]) == (200, "texty")

    await put_session(client, "full")
    await admitted(client, png(2, 2), session="full")
    for text_only in ("texty", "plain"):
        refused = await client.post("/v1/sessions/full/route", json={"route": text_only})
        assert (refused.status, (await error_of(refused))["code"]) == (409, "ROUTE_SWITCH_REJECTED")
    assert (await session_of(client, "full"))["route"] == "vision"
    unknown = await client.post("/v1/sessions/full/route", json={"route": "someday-model"})
    assert unknown.status == 200


async def test_holding_existing_refs(client: Client) -> None:
    [ref] = await admitted(client, png(11, 11))
    await put_session(client, "s-h")
    held = await client.post("/v1/sessions/s-h/holds", json={"refs": [ref, ref]})
    assert (held.status, (await held.json())["holds"]) == (200, [ref])

    missing = "sha256:" + "0" * 64
    response = await client.post("/v1/sessions/s-h/holds", json={"refs": [missing]})
    assert (response.status, (await error_of(response))["code"]) == (404, "ATTACHMENT_NOT_FOUND")
    bad = await client.post("/v1/sessions/s-h/holds", json={"refs": ["sha256:../../x"]})
    assert (bad.status, (await error_of(bad))["code"]) == (400, "INVALID_ATTACHMENT_REF")
    assert (await session_of(client, "s-h"))["holds"] == [ref]


async def test_fifty_concurrent_admissions_into_one_session(client: Client) -> None:
    await put_session(client, "busy")
    images = [png(4, 4, seed=i) for i in range(50)]
    responses = await asyncio.gather(*(admit(client, image, session="busy") for image in images))
    assert [r.status for r in responses] == [201] * 50
    held = (await session_of(client, "busy"))["holds"]
    assert sorted(held) == sorted(str(Ref.of("sha256", i)) for i in images)


async def test_every_hold_change_renews_the_lease(client: Client) -> None:
    index = client.app[STORE].index
    [ref] = await admitted(client, png(12, 12))

    async def lease() -> float:
        row = await index.get(ref)
        assert row is not None
        return row.lease_at

    leases = [await lease()]
    await admitted(client, png(12, 12))  # dedup
    leases.append(await lease())
    await put_session(client, "l")
    await client.post("/v1/sessions/l/holds", json={"refs": [ref]})
    leases.append(await lease())
    await client.post("/v1/sessions/l/fork", json={"session": "l2"})
    leases.append(await lease())
    await client.delete("/v1/sessions/l")
    leases.append(await lease())
    assert leases == sorted(leases)
    assert len(set(leases)) == len(leases)


def _route(rid: str, by: str, modalities: list[str], provider: str | None, **rest: Any) -> dict[str, Any]:
    return {
        "id": rid,
        "declared_by": by,
        "input_modalities": modalities,
        "provider": provider,
        "max_request_image_bytes": None,
        "max_request_images": None,
        "max_request_side": None,
        "max_request_pixels": None,
        "max_request_bytes": None,
        "source": None,
        "replaces": None,
        **rest,
    }


async def test_routes_are_listed_with_where_each_declaration_comes_from(client: Client) -> None:
    body = await (await client.get("/v1/routes")).json()
    store = client.app[STORE]
    assert (body["catalog"], body["policy"]) == (store.routes.catalog.version, store.policy.fingerprint)
    configured = [r for r in body["routes"] if r["declared_by"] == "config"]
    assert configured == [
        _route("plain", "config", ["text"], None),
        _route("texty", "config", ["text"], None),
        _route("vision", "config", ["text", "image"], "openai-chat"),
    ]
    assert body["routes"][:3] == configured  # the configuration's first, then the catalog's
    catalogued = body["routes"][3:]
    assert len(catalogued) == len(store.routes.catalog.entries)
    claude = next(r for r in catalogued if r["id"] == "claude-*")
    assert claude == _route("claude-*", "catalog", ["text", "image"], "anthropic", source=claude["source"])
    assert claude["source"].startswith("https://")
    assert [r["id"] for r in catalogued] == sorted(r["id"] for r in catalogued)


async def test_a_configured_route_says_which_catalog_entry_it_replaces(make_client: MakeClient) -> None:
    client = await make_client(routes={"gpt-4o": {"input_modalities": ["text"]}})
    body = await (await client.get("/v1/routes")).json()
    assert body["routes"][0] == _route("gpt-4o", "config", ["text"], None, replaces="gpt-4o*")
    resolved = await (await client.get("/v1/routes/gpt-4o")).json()
    assert (resolved["accepts_images"], resolved["route"]["declared_by"]) == (False, "config")
    refused = await admit(client, png(4, 4), route="gpt-4o")
    assert (await error_of(refused))["code"] == "MODALITY_UNSUPPORTED"  # the configuration wins


@pytest.mark.parametrize(
    ("path", "model", "accepts", "entry", "matched", "provider"),
    [
        ("vision", "vision", True, "vision", None, "openai-chat"),
        ("texty", "texty", False, "texty", None, None),
        (
            "claude-3-5-haiku-20241022",
            "claude-3-5-haiku-20241022",
            True,
            "claude-*",
            "claude-3-5-haiku-20241022",
            "anthropic",
        ),
        ("openai/gpt-4o-mini", "openai/gpt-4o-mini", True, "gpt-4o*", "gpt-4o-mini", None),
        ("openai%2Fgpt-4o-mini", "openai/gpt-4o-mini", True, "gpt-4o*", "gpt-4o-mini", None),
        (
            "us.anthropic.claude-3-haiku-20240307-v1:0",
            "us.anthropic.claude-3-haiku-20240307-v1:0",
            True,
            "claude-*",
            "claude-3-haiku-20240307-v1",
            "anthropic",
        ),
        ("deepseek-chat", "deepseek-chat", False, "deepseek-chat", "deepseek-chat", "openai-chat"),
    ],
)
async def test_a_model_id_resolves(
    client: Client,
    path: str,
    model: str,
    accepts: bool,
    entry: str,
    matched: str | None,
    provider: str | None,
) -> None:
    response = await client.get(f"/v1/routes/{path}")
    assert response.status == 200
    body = await response.json()
    assert (body["model"], body["accepts_images"], body["matched"]) == (model, accepts, matched)
    assert (body["route"]["id"], body["route"]["provider"]) == (entry, provider)
    assert body["route"]["declared_by"] == ("config" if matched is None else "catalog")


async def test_an_unknown_model_resolves_to_nothing(client: Client) -> None:
    body = await (await client.get("/v1/routes/my-own-llm")).json()
    assert body == {"model": "my-own-llm", "accepts_images": None, "route": None, "matched": None}
    too_long = await client.get("/v1/routes/" + "m" * 257)
    assert (too_long.status, (await error_of(too_long))["code"]) == (400, "INVALID_REQUEST")


async def test_multipart_carries_route_and_session(client: Client) -> None:
    await put_session(client, "mp")
    form = aiohttp.FormData()
    form.add_field("source", "user")
    form.add_field("session", "mp")
    form.add_field("image", png(5, 4), filename="a.png", content_type="image/png")
    response = await client.post("/v1/attachments", data=form)
    assert response.status == 201
    assert len((await session_of(client, "mp"))["holds"]) == 1


# -- lifetimes (docs/sessions.md, "Lifetimes") ------------------------------------------------------------


async def test_a_ttl_is_shown_renewed_by_use_and_replaced_by_a_put(client: Client) -> None:
    made = await client.put("/v1/sessions/s", json={"route": "vision", "ttl": 3600})
    assert made.status == 201
    shown = await made.json()
    assert (shown["ttl"], shown["last_used"] == shown["created"]) == (3600, True)
    assert shown["expires"] > shown["last_used"]
    await admit(client, png(12, 12), source="user", session="s")
    used = await session_of(client, "s")
    assert used["last_used"] >= shown["last_used"]
    assert used["expires"] >= shown["expires"]
    again = await client.put("/v1/sessions/s", json={"route": "vision"})  # without a ttl: no change
    assert (again.status, (await again.json())["ttl"]) == (200, 3600)
    longer = await client.put("/v1/sessions/s", json={"route": "vision", "ttl": 86400})
    assert (longer.status, (await longer.json())["ttl"]) == (200, 86400)
    assert (await session_of(client, "s"))["ttl"] == 86400
    forked = await post_json(client, "/v1/sessions/s/fork", {"session": "f"})
    assert (await forked.json())["ttl"] == 86400  # the fork takes the source's lifetime
    await put_session(client, "p")
    kept = await session_of(client, "p")
    assert (kept["ttl"], kept["expires"], kept["last_used"] == kept["created"]) == (None, None, True)


@pytest.mark.parametrize("ttl", [0, -5, 315360001, 1.5, "30d", True])
async def test_a_ttl_is_whole_seconds_up_to_ten_years(client: Client, ttl: object) -> None:
    response = await client.put("/v1/sessions/s", json={"route": "vision", "ttl": ttl})
    assert response.status == 400
    error = await error_of(response)
    assert (error["code"], "$.ttl" in error["message"]) == ("INVALID_REQUEST", True)
    assert (await client.get("/v1/sessions/s")).status == 404


async def test_a_render_renews_the_session_it_names_at_most_once_a_minute(client: Client) -> None:
    sessions = client.app[STORE].sessions
    made, _ = await sessions.create(("", "s"), "vision", 600)
    at = made.used_at
    assert (await sessions.named(("", "s"), now=at + 30)).used_at == at  # read as it was; not renewed
    assert (await sessions.get(("", "s"))).used_at == at
    await sessions.named(("", "s"), now=at + 61)
    renewed = await sessions.get(("", "s"))
    assert (renewed.used_at, renewed.expires_at) == (at + 61, at + 661)
    await sessions.named(("", "s"), now=at + 100)  # 39 s after: not again
    assert (await sessions.get(("", "s"))).used_at == at + 61
    # Through POST /v1/render: a session unused for more than a minute is renewed.
    await sessions.index.touch_session(("", "s"), at - 120, 1e12)  # as if last used two minutes ago
    body = {"messages": [{"role": "user", "content": "hi"}], "provider": "anthropic", "session": "s"}
    assert (await post_json(client, "/v1/render", body)).status == 200
    assert (await sessions.get(("", "s"))).used_at > at - 120
