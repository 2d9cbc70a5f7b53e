"""Tenants and tokens (SPEC 11), and the HTTP limits that keep one client from holding the daemon."""

from __future__ import annotations

import asyncio
import hashlib
import tomllib
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from attachstore.api.common import STORE
from attachstore.cli import main
from attachstore.config import load
from attachstore.errors import ConfigError
from attachstore.refs import Ref
from attachstore.server import check_open_mode
from tests.conftest import MakeClient
from tests.support.http import b64, error_of
from tests.support.images import png
from tests.support.waiting import HANG

Client = TestClient[Any, Any]
TOKENS = {"alpha": "token-of-alpha", "beta": "token-of-beta"}
TENANTS = [{"name": n, "token_sha256": hashlib.sha256(t.encode()).hexdigest()} for n, t in TOKENS.items()]
ROUTES = {"vision": {"input_modalities": ["text", "image"], "provider": "openai-chat"}}


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[tenant]}"}


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client(tenants=TENANTS, routes=ROUTES)


async def admit_as(client: Client, tenant: str, image: bytes, session: str | None = None) -> str:
    body: dict[str, Any] = {"source": "user", "images": [{"data": b64(image)}]}
    if session:
        body["session"] = session
    response = await client.post("/v1/attachments", json=body, headers=auth(tenant))
    assert response.status == 201, await response.text()
    ref: str = (await response.json())["attachments"][0]["ref"]
    return ref


async def test_a_token_is_required(client: Client) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {TOKENS['alpha']}"}):
        response = await client.get("/v1/routes", headers=headers)
        assert (response.status, (await error_of(response))["code"]) == (401, "UNAUTHORIZED")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await client.get("/v1/routes", headers=auth("alpha"))).status == 200
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_another_tenants_ref_answers_like_one_that_does_not_exist(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = png(12, 9)
    ref = await admit_as(client, "alpha", image)
    absent = str(Ref.of("sha256", png(13, 9)))
    files_read: list[str] = []
    store = client.app[STORE]
    real = store.blobs.read

    async def recording(r: Ref, size: int, *, fresh: bool = False) -> bytes:
        files_read.append(str(r))
        return await real(r, size, fresh=fresh)

    monkeypatch.setattr(store.blobs, "read", recording)

    async def answer(method: str, path: str, **kw: Any) -> tuple[int, str]:
        response = await client.request(method, path, headers={**auth("beta"), **kw.pop("headers", {})}, **kw)
        return response.status, (await response.text()).replace(ref, "REF").replace(absent, "REF")

    assert (await client.put("/v1/sessions/b", json={}, headers=auth("beta"))).status == 201
    cases = [
        ("GET", "/v1/attachments/{}", {}),
        ("HEAD", "/v1/attachments/{}", {}),
        ("GET", "/v1/attachments/{}", {"headers": {"If-None-Match": '"{}"'}}),
        ("GET", "/v1/attachments/{}/meta", {}),
        ("POST", "/v1/sessions/b/holds", {"json": {"refs": ["{}"]}}),
    ]
    for method, path, extra in cases:
        answers = []
        for target in (ref, absent):
            kw = {
                k: ({h: v.format(target) for h, v in val.items()} if k == "headers" else {"refs": [target]})
                for k, val in extra.items()
            }
            answers.append(await answer(method, path.format(target), **kw))
        assert answers[0] == answers[1], (method, path)
        assert answers[0][0] == 404
    assert files_read == []  # nothing about the object was looked at beyond the index
    # render: unavailable, exactly like a missing object
    response = await client.post(
        "/v1/render",
        json={"route": "vision", "messages": [{"role": "user", "content": [{"type": "image", "ref": ref}]}]},
        headers=auth("beta"),
    )
    assert (await response.json())["summary"]["unavailable"] == 1
    # alpha still reads it, and once beta admits the same bytes, beta can too
    assert (await client.get(f"/v1/attachments/{ref}", headers=auth("alpha"))).status == 200
    assert await admit_as(client, "beta", image) == ref
    assert await (await client.get(f"/v1/attachments/{ref}", headers=auth("beta"))).read() == image


async def test_sessions_belong_to_their_tenant(client: Client) -> None:
    ref = await admit_as(client, "alpha", png(6, 6))
    assert (await client.put("/v1/sessions/s", json={"route": "vision"}, headers=auth("alpha"))).status == 201
    await client.post("/v1/sessions/s/holds", json={"refs": [ref]}, headers=auth("alpha"))
    # beta cannot see, fork, hold into or delete alpha's session: it answers like a missing one
    for method, path, body in [
        ("GET", "/v1/sessions/s", None),
        ("POST", "/v1/sessions/s/fork", {"session": "mine"}),
        ("POST", "/v1/sessions/s/holds", {"refs": []}),
        ("DELETE", "/v1/sessions/s", None),
    ]:
        response = await client.request(method, path, json=body, headers=auth("beta"))
        assert (response.status, (await error_of(response))["code"]) == (404, "SESSION_NOT_FOUND")
    # beta's own session of the same id is another session
    assert (await client.put("/v1/sessions/s", json={}, headers=auth("beta"))).status == 201
    mine = await (await client.get("/v1/sessions/s", headers=auth("beta"))).json()
    assert mine["holds"] == []
    theirs = await (await client.get("/v1/sessions/s", headers=auth("alpha"))).json()
    assert theirs["holds"] == [ref]


async def test_admitting_into_another_tenants_session_is_not_found(client: Client) -> None:
    assert (await client.put("/v1/sessions/s", json={}, headers=auth("alpha"))).status == 201
    body = {"source": "user", "session": "s", "images": [{"data": b64(png(3, 3))}]}
    response = await client.post("/v1/attachments", json=body, headers=auth("beta"))
    assert (response.status, (await error_of(response))["code"]) == (404, "SESSION_NOT_FOUND")


def test_tokens_are_configured_by_their_hash(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "new", "--tenant", "gamma"]) == 0
    out = capsys.readouterr().out
    token = out.splitlines()[0].removeprefix("token: ")
    lines = "\n".join(line for line in out.splitlines() if not line.startswith(("token:", "#")))
    [tenant] = tomllib.loads(lines)["tenants"]
    assert tenant == {"name": "gamma", "token_sha256": hashlib.sha256(token.encode()).hexdigest()}
    config = tmp_path / "c.toml"
    config.write_text(f'listen = "0.0.0.0:8731"\n{lines}\n')
    check_open_mode(load(str(config), env={}))  # with a token, any address may be served
    config.write_text(f"{lines}\n{lines}\n")
    with pytest.raises(ConfigError, match="same token_sha256"):
        load(str(config), env={})


async def test_a_slow_body_is_cut_off_while_others_are_served(make_client: MakeClient) -> None:
    client = await make_client(http={"read_timeout": "300ms"})
    assert client.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(
        b"POST /v1/attachments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n" + b'{"source": '
    )
    await writer.drain()
    # Meanwhile the daemon serves everyone else.
    assert (await client.get("/healthz")).status == 200
    head = await asyncio.wait_for(reader.read(4096), 10)
    assert head.startswith(b"HTTP/1.1 408")
    assert b"REQUEST_TIMEOUT" in head
    writer.close()


async def test_past_the_admission_cap_the_answer_is_busy_and_reads_flow(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client(admission={"max_concurrent": 1})
    image = png(5, 5)
    ref = str(Ref.of("sha256", image))
    assert (
        await client.post("/v1/attachments", json={"source": "user", "images": [{"data": b64(image)}]})
    ).status
    store = client.app[STORE]
    holding, release = asyncio.Event(), asyncio.Event()
    real = store.admissions._admit

    async def slow(*args: Any) -> Any:
        holding.set()
        await release.wait()
        return await real(*args)

    monkeypatch.setattr(store.admissions, "_admit", slow)
    body = {"source": "user", "images": [{"data": b64(png(6, 6))}]}
    first = asyncio.create_task(client.post("/v1/attachments", json=body))
    async with asyncio.timeout(HANG):  # a guard against a hang
        await holding.wait()  # the first admission holds the one place
    busy = await client.post("/v1/attachments", json=body)
    assert (busy.status, (await error_of(busy))["code"]) == (503, "SERVER_BUSY")
    assert busy.headers["Retry-After"] == "1"
    assert (await client.get(f"/v1/attachments/{ref}")).status == 200
    release.set()
    assert (await first).status == 201


async def test_security_headers_on_every_response(client: Client) -> None:
    ref = await admit_as(client, "alpha", png(4, 4))
    for response in [
        await client.get("/healthz"),
        await client.get("/nowhere"),
        await client.get("/v1/routes"),
        await client.get(f"/v1/attachments/{ref}", headers=auth("alpha")),
        await client.get("/v1/sessions/x", headers=auth("alpha")),
    ]:
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "Cache-Control" in response.headers


async def test_a_display_name_is_seen_only_by_the_tenant_that_gave_it(client: Client) -> None:
    image = png(14, 9)
    body = {"source": "user", "images": [{"data": b64(image), "name": "alpha-secret-plan.png"}]}
    ref = (await (await client.post("/v1/attachments", json=body, headers=auth("alpha"))).json())[
        "attachments"
    ][0]["ref"]
    body["images"][0]["name"] = "beta.png"
    assert (await client.post("/v1/attachments", json=body, headers=auth("beta"))).status == 201
    beta = await (await client.get(f"/v1/attachments/{ref}/meta", headers=auth("beta"))).json()
    alpha = await (await client.get(f"/v1/attachments/{ref}/meta", headers=auth("alpha"))).json()
    assert (alpha["name"], beta["name"]) == ("alpha-secret-plan.png", "beta.png")


async def _raw(port: int, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    head = await asyncio.wait_for(reader.read(65536), 10)
    return reader, writer, head


async def test_an_oversized_header_is_refused(make_client: MakeClient) -> None:
    client = await make_client(http={"max_header_bytes": 1024})
    assert client.port is not None
    _, writer, head = await _raw(
        client.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n"
    )
    writer.close()
    assert head.split(b"\r\n")[0].split(b" ")[1] in (b"400", b"431")
    assert (await client.get("/healthz")).status == 200  # and the daemon keeps serving


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout(make_client: MakeClient) -> None:
    client = await make_client(http={"keepalive_timeout": "300ms"})
    assert client.port is not None
    reader, writer, head = await _raw(client.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    # Idle past the timeout: the daemon closes its end (the read sees the end of the stream).
    assert await asyncio.wait_for(reader.read(100), 10) == b""
    writer.close()
    # With the default (15 s), the same connection is still open a second later.
    default = await make_client()
    assert default.port is not None
    reader, writer, _ = await _raw(default.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(100), 1)
    writer.close()
