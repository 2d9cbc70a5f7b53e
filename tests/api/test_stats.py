"""GET /v1/stats through the real app: the totals of the whole store in open mode, a tenant's own with tokens,
and what gc would collect, counted in the background."""

from __future__ import annotations

import time

from attachstore.api.common import STORE
from tests.api.test_listings import get_json
from tests.conftest import MakeClient
from tests.service.test_tenants import TENANTS, admit_as, auth
from tests.support.http import Client, admit_ok
from tests.support.images import jpeg, png


async def test_the_stores_figures(client: Client) -> None:
    empty = await get_json(client, "/v1/stats")
    assert (empty["tenant"], empty["objects"], empty["bytes"], empty["sessions"]) == (None, 0, 0, 0)
    assert empty["free_bytes"] > 0
    assert (empty["last_gc"], empty["last_audit"]) == (None, None)

    for id_ in ("s1", "s2"):
        assert (await client.put(f"/v1/sessions/{id_}", json={})).status == 201
    [a, b] = await admit_ok(client, png(8, 8), jpeg(200, 150), session="s1")
    held = await client.post("/v1/sessions/s2/holds", json={"refs": [a["ref"]]})
    assert held.status == 200
    stats = await get_json(client, "/v1/stats")
    assert (stats["objects"], stats["bytes"]) == (2, a["bytes"] + b["bytes"])
    assert stats["by_type"] == {
        "image/jpeg": {"objects": 1, "bytes": b["bytes"]},
        "image/png": {"objects": 1, "bytes": a["bytes"]},
    }
    assert stats["held_bytes"] == 2 * a["bytes"] + b["bytes"]
    assert stats["saved_bytes"] == a["bytes"]  # the second hold of a needs no second copy
    assert (stats["sessions"], stats["expired_sessions"], stats["quarantined"]) == (2, 0, 0)
    assert (stats["variants"], stats["previews"]) == (0, 0)

    preview = await client.get(f"/v1/attachments/{b['ref']}/preview?size=64")
    assert preview.status == 200
    assert (await get_json(client, "/v1/stats"))["previews"] == 1


async def test_what_gc_would_collect_is_counted_in_the_background(client: Client) -> None:
    [a] = await admit_ok(client, png(8, 8))
    figures = client.app[STORE].figures
    await figures.count(time.time() + 10 * 86400)  # as the background count would, ten days on
    stats = await get_json(client, "/v1/stats")
    assert (stats["collectible"]["objects"], stats["collectible"]["bytes"]) == (1, a["bytes"])
    assert stats["collectible"]["age_seconds"] < 0  # counted "in the future": the clock this test moved
    await figures.count(time.time())
    assert (await get_json(client, "/v1/stats"))["collectible"]["objects"] == 0  # still in its grace


async def test_a_tenant_sees_its_own_figures(make_client: MakeClient) -> None:
    client = await make_client(tenants=TENANTS)
    assert (await client.put("/v1/sessions/s", json={}, headers=auth("alpha"))).status == 201
    shared = png(9, 9)
    await admit_as(client, "alpha", shared, session="s")
    await admit_as(client, "alpha", png(10, 10))
    await admit_as(client, "beta", shared)
    alpha = await get_json(client, "/v1/stats", **auth("alpha"))
    beta = await get_json(client, "/v1/stats", **auth("beta"))
    assert (alpha["tenant"], alpha["objects"], alpha["sessions"]) == ("alpha", 2, 1)
    assert (beta["tenant"], beta["objects"], beta["sessions"]) == ("beta", 1, 0)
    for store_only in ("variants", "previews", "collectible", "last_gc", "last_audit", "free_bytes"):
        assert alpha[store_only] is None
