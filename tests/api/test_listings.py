"""GET /v1/sessions and GET /v1/sessions/{id}/attachments through the real app: pages, cursors, filters, and
tenants that see only their own."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import MakeClient
from tests.service.test_tenants import TENANTS, admit_as, auth
from tests.support.http import Client, admit_ok, error_of
from tests.support.images import png


async def get_json(client: Client, path: str, **headers: str) -> Any:
    response = await client.get(path, headers=headers)
    assert response.status == 200, await response.text()
    return await response.json()


async def every_page(client: Client, path: str, key: str, headers: dict[str, str] | None = None) -> list[Any]:
    found: list[Any] = []
    url = path
    while True:
        page = await get_json(client, url, **(headers or {}))
        found += page[key]
        if page["next"] is None:
            return found
        url = f"{path}{'&' if '?' in path else '?'}cursor={page['next']}"


async def test_sessions_are_listed_newest_first_in_pages(client: Client) -> None:
    for id_ in ("s1", "s2", "s3"):
        assert (await client.put(f"/v1/sessions/{id_}", json={})).status == 201
    [a, b] = await admit_ok(client, png(4, 4), png(5, 5), session="s2")
    listed = await every_page(client, "/v1/sessions?limit=2", "sessions")
    assert [s["session"] for s in listed] == ["s2", "s3", "s1"]  # the admission into s2 used it last
    s2 = listed[0]
    assert set(s2) == {"session", "route", "created", "last_used", "expires", "ttl", "images", "bytes"}
    assert (s2["route"], s2["expires"], s2["ttl"], s2["images"]) == (None, None, None, 2)
    assert s2["bytes"] == a["bytes"] + b["bytes"]
    assert s2["created"].endswith("Z")
    first = await get_json(client, "/v1/sessions?limit=2")
    assert [s["session"] for s in first["sessions"]] == ["s2", "s3"]
    assert isinstance(first["next"], str)
    assert (await get_json(client, "/v1/sessions"))["next"] is None
    assert [s["session"] for s in (await get_json(client, "/v1/sessions?prefix=s1"))["sessions"]] == ["s1"]
    assert (await get_json(client, "/v1/sessions?expired=true"))["sessions"] == []
    assert len((await get_json(client, "/v1/sessions?expired=false"))["sessions"]) == 3


async def test_a_sessions_attachments_oldest_held_first(client: Client) -> None:
    assert (await client.put("/v1/sessions/s", json={})).status == 201
    refs = [a["ref"] for a in await admit_ok(client, png(3, 3), png(4, 4), png(5, 5), session="s")]
    [meta] = await admit_ok(client, png(6, 6), name="six.png")
    held = await client.post("/v1/sessions/s/holds", json={"refs": [meta["ref"]]})
    assert held.status == 200
    listed = await every_page(client, "/v1/sessions/s/attachments?limit=2", "attachments")
    assert [h["attachment"]["ref"] for h in listed[3:]] == [meta["ref"]]
    assert sorted(h["attachment"]["ref"] for h in listed[:3]) == sorted(refs)  # admitted at one time
    assert listed[3]["attachment"] == await get_json(client, f"/v1/attachments/{meta['ref']}/meta")
    assert listed[0]["held"] <= listed[3]["held"]
    page = await get_json(client, "/v1/sessions/s/attachments")
    assert (page["session"], len(page["attachments"]), page["next"]) == ("s", 4, None)
    assert (await client.put("/v1/sessions/empty", json={})).status == 201
    assert (await get_json(client, "/v1/sessions/empty/attachments"))["attachments"] == []
    missing = await client.get("/v1/sessions/nope/attachments")
    assert (missing.status, (await error_of(missing))["code"]) == (404, "SESSION_NOT_FOUND")


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "limit=1&limit=2",
        "expired=yes",
        "cursor=nope",
        "prefix=a%20b",
        "prefix=" + "a" * 129,
    ],
)
async def test_bad_queries_are_invalid_requests(client: Client, query: str) -> None:
    response = await client.get(f"/v1/sessions?{query}")
    assert (response.status, (await error_of(response))["code"]) == (400, "INVALID_REQUEST")


async def test_a_cursor_of_one_listing_is_refused_by_the_other(client: Client) -> None:
    for id_ in ("s1", "s2"):
        assert (await client.put(f"/v1/sessions/{id_}", json={})).status == 201
    await admit_ok(client, png(3, 3), png(4, 4), session="s1")
    sessions = (await get_json(client, "/v1/sessions?limit=1"))["next"]
    held = (await get_json(client, "/v1/sessions/s1/attachments?limit=1"))["next"]
    for path in (f"/v1/sessions/s1/attachments?cursor={sessions}", f"/v1/sessions?cursor={held}"):
        response = await client.get(path)
        assert (response.status, (await error_of(response))["code"]) == (400, "INVALID_REQUEST")
    bad = await client.get("/v1/sessions/a%20b/attachments")
    assert bad.status == 400


async def test_a_tenant_lists_only_its_own(make_client: MakeClient) -> None:
    client = await make_client(tenants=TENANTS)
    for tenant in ("alpha", "beta"):
        response = await client.put(f"/v1/sessions/{tenant}-s", json={}, headers=auth(tenant))
        assert response.status == 201
    ref = await admit_as(client, "alpha", png(7, 7), session="alpha-s")
    alpha = await get_json(client, "/v1/sessions", **auth("alpha"))
    assert [(s["session"], s["images"]) for s in alpha["sessions"]] == [("alpha-s", 1)]
    beta = await get_json(client, "/v1/sessions", **auth("beta"))
    assert [s["session"] for s in beta["sessions"]] == ["beta-s"]
    held = await get_json(client, "/v1/sessions/alpha-s/attachments", **auth("alpha"))
    assert [h["attachment"]["ref"] for h in held["attachments"]] == [ref]
    other = await client.get("/v1/sessions/alpha-s/attachments", headers=auth("beta"))
    assert other.status == 404
    assert (await client.get("/v1/sessions")).status == 401
