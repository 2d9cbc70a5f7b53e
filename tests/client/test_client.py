"""attachstore.client: the AsyncClient against the real app, the blocking Client and the Unix-socket option
against a real daemon, and the error paths a client can meet (docs/clients.md)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from attachstore.client import (
    AsyncClient,
    AttachstoreClientError,
    Client,
    ConnectionFailed,
    Image,
    TimedOut,
    aio,
)
from attachstore.errors import AttachstoreError
from attachstore.refs import Ref
from attachstore.render import MessageIn
from attachstore.service.names import display_name
from tests.conftest import MakeClient
from tests.support.daemon import Daemons, free_port
from tests.support.faults import flip_byte
from tests.support.http import object_path
from tests.support.images import PDF, jpeg, png

ROUTES: dict[str, dict[str, Any]] = {
    "vision": {"input_modalities": ["text", "image"], "provider": "openai-chat"},
    "text-only": {"input_modalities": ["text"]},
}
TOKEN = "token-of-alpha"
TENANTS = [{"name": "alpha", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}]
MakeAsync = Callable[..., Awaitable[AsyncClient]]
AiohttpServer = Callable[..., Awaitable[TestServer]]


@pytest.fixture
async def make_async(make_client: MakeClient) -> AsyncIterator[MakeAsync]:
    """An AsyncClient on the real app; keyword arguments are config sections (routes default to ROUTES)."""
    made: list[AsyncClient] = []

    async def make(*, token: str | None = None, **sections: Any) -> AsyncClient:
        server = await make_client(**{"routes": ROUTES, **sections})
        c = AsyncClient(str(server.make_url("")), token=token)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


@pytest.fixture
async def ac(make_async: MakeAsync) -> AsyncClient:
    return await make_async()


async def fails(call: Awaitable[object]) -> AttachstoreClientError:
    with pytest.raises(AttachstoreClientError) as caught:
        await call
    return caught.value


# --- attachments ---


async def test_admit_read_and_meta(ac: AsyncClient) -> None:
    shot, photo = png(40, 30), jpeg(20, 10)
    admission = await ac.admit([Image(shot, "image/png", "dir/shot.png"), photo], source="user")
    assert (admission.degraded, admission.diagnostics, admission.text) == (False, [], None)
    first, second = admission.attachments
    assert (
        first.ref,
        first.media_type,
        first.bytes,
        first.width,
        first.height,
        first.frames,
        first.name,
    ) == (
        str(Ref.of("sha256", shot)),
        "image/png",
        len(shot),
        40,
        30,
        1,
        "shot.png",
    )
    assert (second.media_type, second.name) == ("image/jpeg", None)
    assert admission.refs == [first.ref, second.ref]
    assert await ac.read(first.ref) == shot
    assert await ac.read(second.ref) == photo
    assert await ac.meta(first.ref) == first
    blob = await ac.read_response(first.ref)
    assert (blob.data, blob.media_type, blob.etag, blob.not_modified) == (
        shot,
        "image/png",
        f'"{first.ref}"',
        False,
    )
    cached = await ac.read_response(first.ref, if_none_match=blob.etag)
    assert (cached.data, cached.not_modified, cached.etag) == (None, True, blob.etag)
    # One image, not in a list.
    assert (await ac.admit(Image(photo), source="command")).refs == [second.ref]
    assert (await ac.admit(photo, source="user")).refs == [second.ref]


async def test_names_reach_the_daemon_as_given(ac: AsyncClient) -> None:
    names = [
        "Bildschirmfoto ü 2026.png",
        'say "cheese".png',
        "C:\\Users\\me\\shot.png",
        "a\r\nb\t.png",
        " ",
        "",
    ]
    for seed, name in enumerate(names):
        [a] = (await ac.admit(Image(png(9, 9, seed=seed), name=name), source="user")).attachments
        assert a.name == display_name(name), name
        assert (await ac.meta(a.ref)).name == display_name(name)


async def test_a_tool_image_without_a_vision_route_degrades(ac: AsyncClient) -> None:
    shot = png(10, 10)
    admission = await ac.admit(Image(shot, name="chart.png"), source="tool")
    assert (admission.degraded, admission.attachments, admission.refs) == (True, [], [])
    [d] = admission.diagnostics
    assert (d.index, d.media_type, d.name, d.code) == (0, None, "chart.png", "MODALITY_UNSUPPORTED")
    assert admission.text is not None
    assert "MODALITY_UNSUPPORTED" in admission.text
    assert (await fails(ac.meta(str(Ref.of("sha256", shot))))).code == "ATTACHMENT_NOT_FOUND"  # not stored


async def test_a_tool_batch_with_one_bad_image_degrades_with_a_diagnostic_each(ac: AsyncClient) -> None:
    admission = await ac.admit(
        [Image(png(10, 10), name="ok.png"), Image(PDF, name="doc.pdf")], source="mcp", route="vision"
    )
    assert admission.degraded
    ok, bad = admission.diagnostics
    assert (ok.index, ok.code, ok.message, ok.media_type) == (0, None, "valid", "image/png")
    assert (bad.index, bad.code, bad.name) == (1, "UNSUPPORTED_IMAGE_TYPE", "doc.pdf")


async def test_admission_rejections_carry_code_status_index_and_hint(make_async: MakeAsync) -> None:
    ac = await make_async(limits={"max_image_bytes": 4000}, admission={"oversize": "reject"})
    small = png(8, 8)
    e = await fails(ac.admit([small, PDF], source="user"))
    assert (e.code, e.status, e.index) == ("UNSUPPORTED_IMAGE_TYPE", 422, 1)
    assert "PDF" in e.message
    e = await fails(ac.admit([small, Image(small, "image/jpeg")], source="user"))
    assert (e.code, e.status, e.index) == ("IMAGE_TYPE_MISMATCH", 422, 1)
    assert e.hint is not None
    assert "image/png" in e.hint
    e = await fails(ac.admit([png(60, 60)], source="command"))
    assert (e.code, e.status, e.index) == ("IMAGE_TOO_LARGE", 422, 0)
    assert e.hint is not None
    assert "4,000 bytes" in e.hint
    assert str(e) == f"IMAGE_TOO_LARGE (image 0): {e.message}"
    e = await fails(ac.admit(small, source="user", route="text-only"))
    assert (e.code, e.status, e.index) == ("MODALITY_UNSUPPORTED", 422, None)
    # Errors are the daemon's errors: one except clause catches a library and a client failure alike.
    assert isinstance(e, AttachstoreError)


async def test_an_admission_over_the_body_cap_is_413(make_async: MakeAsync) -> None:
    ac = await make_async(http={"max_body_bytes": 2000})
    e = await fails(ac.admit(png(60, 60), source="user"))
    assert (e.code, e.status) == ("PAYLOAD_TOO_LARGE", 413)
    assert e.hint is not None
    assert (await ac.admit(png(8, 8), source="user")).refs  # the same client goes on


async def test_request_errors(ac: AsyncClient) -> None:
    absent = str(Ref.of("sha256", b"never admitted"))
    for bad in ("not-a-ref", "SHA256:" + "A" * 64, "../../etc/passwd", "sha256:ab/cd", "sha256:" + "0" * 200):
        e = await fails(ac.read(bad))
        assert (e.code, e.status) == ("INVALID_ATTACHMENT_REF", 400), bad
        assert (await fails(ac.meta(bad))).code == "INVALID_ATTACHMENT_REF", bad
    e = await fails(ac.read(absent))
    assert (e.code, e.status) == ("ATTACHMENT_NOT_FOUND", 404)
    assert (await fails(ac.meta(absent))).code == "ATTACHMENT_NOT_FOUND"
    assert (await fails(ac.read_response(absent, if_none_match=f'"{absent}"'))).status == 404
    e = await fails(ac.admit([], source="user"))
    assert (e.code, e.status) == ("INVALID_REQUEST", 400)
    e = await fails(ac.admit(png(8, 8), source="bot"))  # type: ignore[arg-type]
    assert (e.code, e.status) == ("INVALID_REQUEST", 400)
    assert "source" in e.message
    e = await fails(ac.admit(png(8, 8), source="user", session="chat-42"))
    assert (e.code, e.status) == ("SESSION_NOT_FOUND", 404)
    e = await fails(ac.get_session("no spaces/here"))
    assert (e.code, e.status) == ("INVALID_REQUEST", 400)


async def test_a_stored_copy_damaged_on_disk_is_500_until_admitted_again(
    ac: AsyncClient, data_dir: Path
) -> None:
    shot = png(30, 30)
    [a] = (await ac.admit(shot, source="user")).attachments
    flip_byte(object_path(data_dir, a.ref), len(shot) // 2)
    e = await fails(ac.read(a.ref))
    assert (e.code, e.status) == ("ATTACHMENT_CORRUPT", 500)
    assert (await fails(ac.meta(a.ref))).code == "ATTACHMENT_CORRUPT"
    rendered = await ac.render(
        [{"role": "user", "content": [{"type": "image", "ref": a.ref}]}], route="vision"
    )
    assert rendered.summary.unavailable == 1
    await ac.admit(shot, source="user")  # heals
    assert await ac.read(a.ref) == shot


# --- render ---


async def test_render(ac: AsyncClient) -> None:
    shot = png(32, 16)
    [a] = (await ac.admit(shot, source="user")).attachments
    await ac.create_session("chat-1", "vision")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You review screenshots."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "What is this?"}, {"type": "image", "ref": a.ref}],
        },
    ]
    rendered = await ac.render(messages, session="chat-1")
    assert rendered.provider == "openai-chat"  # the session's route names it
    assert (rendered.summary.included, rendered.summary.omitted, rendered.summary.unavailable) == (1, 0, 0)
    [_, user] = rendered.body["messages"]
    assert (
        user["content"][1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(shot).decode()
    )
    # The neutral structs of attachstore.render serialise the same way.
    structs = [msgspec.convert(m, MessageIn) for m in messages]
    assert await ac.render(structs, session="chat-1") == rendered
    other = await ac.render(messages, provider="anthropic", route="vision", max_image_bytes=10, max_images=5)
    assert (other.provider, other.summary.included, other.summary.omitted) == ("anthropic", 0, 1)
    blind = await ac.render(messages, provider="gemini", vision=False)
    assert (blind.summary.omitted, "contents" in blind.body) == (1, True)
    assert (await ac.render(messages, provider="openai-chat", max_images=0)).summary.omitted == 1


async def test_render_errors(ac: AsyncClient) -> None:
    ref = str(Ref.of("sha256", b"x"))
    e = await fails(
        ac.render([{"role": "system", "content": [{"type": "image", "ref": ref}]}], provider="gemini")
    )
    assert (e.code, e.status) == ("UNSUPPORTED_CONTENT", 422)
    assert e.hint is not None
    e = await fails(ac.render([{"role": "tool", "content": "done"}], provider="gemini"))
    assert (e.code, e.status) == ("INVALID_REQUEST", 400)
    assert "$.messages[0].tool_call_id" in e.message
    e = await fails(ac.render([{"role": "user", "content": "hi"}]))  # no provider anywhere
    assert (e.code, "$.provider" in e.message) == ("INVALID_REQUEST", True)
    e = await fails(
        ac.render([{"role": "user", "content": [{"type": "image", "ref": "sha256:nope"}]}], route="vision")
    )
    assert e.code == "INVALID_ATTACHMENT_REF"
    e = await fails(ac.render([{"role": "user", "content": "hi"}], provider="gemini", session="absent"))
    assert e.code == "SESSION_NOT_FOUND"


# --- sessions ---


async def test_a_session_with_a_lifetime(ac: AsyncClient) -> None:
    plain = await ac.create_session("chat-7", "vision")
    assert (plain.ttl, plain.expires, plain.last_used) == (None, None, plain.created)
    lived = await ac.create_session("chat-7", "vision", ttl=3600)
    assert lived.ttl == 3600
    assert lived.last_used is not None
    assert lived.expires is not None
    assert (lived.expires - lived.last_used).total_seconds() == pytest.approx(3600, abs=0.002)
    assert (await ac.get_session("chat-7")).ttl == 3600
    e = await fails(ac.create_session("chat-8", ttl=0))
    assert (e.code, e.status) == ("INVALID_REQUEST", 400)


async def test_session_lifecycle(ac: AsyncClient) -> None:
    created = await ac.create_session("chat-42", "vision")
    assert (created.id, created.route, created.holds) == ("chat-42", "vision", [])
    assert isinstance(created.created, datetime)
    assert created.created.utcoffset() is not None
    assert await ac.create_session("chat-42", "vision") == created  # idempotent
    e = await fails(ac.create_session("chat-42", "other"))
    assert (e.code, e.status) == ("SESSION_CONFLICT", 409)
    [a] = (await ac.admit(png(12, 12), source="user", session="chat-42")).attachments
    [b] = (await ac.admit(png(13, 12), source="user")).attachments
    assert (await ac.get_session("chat-42")).holds == [a.ref]
    e = await fails(ac.switch_route("chat-42", "text-only"))
    assert (e.code, e.status) == ("ROUTE_SWITCH_REJECTED", 409)
    assert e.hint is not None
    assert (await ac.switch_route("chat-42", None)).route is None
    assert (await ac.switch_route("chat-42", "vision")).route == "vision"
    held = await ac.hold("chat-42", iter([b.ref, a.ref, b.ref]))
    assert held.holds == [a.ref, b.ref]
    e = await fails(ac.hold("chat-42", [str(Ref.of("sha256", b"absent"))]))
    assert (e.code, e.status) == ("ATTACHMENT_NOT_FOUND", 404)
    e = await fails(ac.hold("chat-42", ["sha256:short"]))
    assert (e.code, e.status) == ("INVALID_ATTACHMENT_REF", 400)
    fork = await ac.fork("chat-42", "chat-42.b")
    assert (fork.id, fork.route, fork.holds) == ("chat-42.b", "vision", [a.ref, b.ref])
    e = await fails(ac.fork("chat-42", "chat-42.b"))
    assert (e.code, e.status) == ("SESSION_CONFLICT", 409)
    assert await ac.delete_session("chat-42") == 2
    for call in (ac.get_session("chat-42"), ac.delete_session("chat-42"), ac.switch_route("chat-42", None)):
        e = await fails(call)
        assert (e.code, e.status) == ("SESSION_NOT_FOUND", 404)
    assert (await ac.get_session("chat-42.b")).holds == [a.ref, b.ref]


async def test_dot_session_ids(ac: AsyncClient) -> None:
    # "." and ".." are refused (URL handling would drop them as dot segments); "..." is an id like any.
    for id in (".", ".."):
        e = await fails(ac.create_session(id))
        assert (e.code, e.status) == ("INVALID_REQUEST", 400)
    assert (await ac.create_session("...")).id == "..."
    assert (await ac.get_session("...")).id == "..."
    assert await ac.delete_session("...") == 0


# --- the daemon ---


async def test_routes_health_and_readiness(ac: AsyncClient) -> None:
    text_only, vision, *catalogued = await ac.routes()
    assert (text_only.id, text_only.vision, text_only.provider) == ("text-only", False, None)
    assert (vision.id, vision.vision, vision.provider, vision.declared_by) == (
        "vision",
        True,
        "openai-chat",
        "config",
    )
    assert catalogued
    assert {r.declared_by for r in catalogued} == {"catalog"}
    claude = await ac.route("anthropic/claude-opus-4-8")
    assert claude.route is not None
    assert (claude.accepts_images, claude.route.id, claude.matched) == (True, "claude-*", "claude-opus-4-8")
    unknown = await ac.route("my-llm")
    assert (unknown.accepts_images, unknown.route) == (None, None)
    assert (await ac.healthz()).status == "ok"
    assert (await ac.readyz()).status == "ready"


async def test_a_token_is_sent_and_its_absence_is_401(make_async: MakeAsync) -> None:
    open_client = await make_async(tenants=TENANTS)
    e = await fails(open_client.routes())
    assert (e.code, e.status) == ("UNAUTHORIZED", 401)
    assert e.response_headers["www-authenticate"].startswith("Bearer")
    assert (await open_client.healthz()).status == "ok"  # an open path
    authorised = AsyncClient(open_client.base_url, token=TOKEN)
    async with authorised:
        assert [r.id for r in await authorised.routes() if r.declared_by == "config"] == [
            "text-only",
            "vision",
        ]
        assert (await authorised.create_session("mine")).id == "mine"
    wrong = AsyncClient(open_client.base_url, token="not-the-token")
    async with wrong:
        assert (await fails(wrong.get_session("mine"))).code == "UNAUTHORIZED"


async def test_the_url_and_the_token_come_from_the_environment_when_not_given(
    make_async: MakeAsync, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = await make_async(tenants=TENANTS)
    monkeypatch.setenv("ATTACHSTORE_URL", served.base_url)
    monkeypatch.setenv("ATTACHSTORE_TOKEN", TOKEN)
    async with AsyncClient() as from_env:
        assert from_env.base_url == served.base_url
        assert [r.id for r in await from_env.routes() if r.declared_by == "config"] == ["text-only", "vision"]
    with Client() as blocking:  # the same AsyncClient inside (not called here: the app runs on this loop)
        assert blocking.base_url == served.base_url
    async with AsyncClient(served.base_url, token="") as without:  # given, even empty, beats the environment
        assert (await fails(without.routes())).code == "UNAUTHORIZED"
    async with AsyncClient(f"http://127.0.0.1:{free_port()}") as elsewhere:
        assert isinstance(await fails(elsewhere.healthz()), ConnectionFailed)
    monkeypatch.setenv("ATTACHSTORE_URL", "127.0.0.1:8731")
    with pytest.raises(ValueError, match=r"\$ATTACHSTORE_URL must be an http:// or https:// URL"):
        AsyncClient()
    monkeypatch.delenv("ATTACHSTORE_URL")
    assert AsyncClient().base_url == "http://127.0.0.1:8731"


async def test_the_request_id_is_sent_and_comes_back_with_an_error(ac: AsyncClient) -> None:
    e = await fails(ac.get_session("absent", request_id="host-call-7"))
    assert e.request_id == "host-call-7"
    e = await fails(ac.get_session("absent"))
    assert e.request_id  # the daemon made one


async def test_a_wrong_base_path_is_404_not_found(ac: AsyncClient) -> None:
    async with AsyncClient(ac.base_url + "/attachstore") as elsewhere:
        e = await fails(elsewhere.healthz())
    assert (e.code, e.status) == ("NOT_FOUND", 404)


async def test_no_daemon_is_connection_failed() -> None:
    async with AsyncClient(f"http://127.0.0.1:{free_port()}") as nobody:
        e = await fails(nobody.healthz())
    assert isinstance(e, ConnectionFailed)
    assert (e.code, e.status) == ("CONNECTION_FAILED", 0)
    async with AsyncClient(unix_socket="/nonexistent/attachstore.sock") as nobody:
        e = await fails(nobody.admit(png(8, 8), source="user"))
    assert isinstance(e, ConnectionFailed)
    assert "/nonexistent/attachstore.sock" in e.message


async def test_closing(ac: AsyncClient) -> None:
    await ac.close()
    await ac.close()
    with pytest.raises(RuntimeError, match="closed"):
        await ac.healthz()
    with pytest.raises(ValueError, match="base_url"):
        AsyncClient("127.0.0.1:8731")


# --- what is not attachstore answering: a fake server ---


@pytest.fixture
async def fake(aiohttp_server: AiohttpServer) -> AsyncIterator[tuple[AsyncClient, asyncio.Event]]:
    """A server that answers like a broken proxy; the event releases its stalled handler."""
    release = asyncio.Event()

    async def gateway(request: web.Request) -> web.Response:
        return web.Response(
            status=502, text="<html><h1>502 Bad Gateway</h1></html>", content_type="text/html"
        )

    async def stall(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"status": "late"})

    async def peer(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return web.json_response({"status": str(peer)})

    async def junk(request: web.Request) -> web.Response:
        return web.Response(body=b"<html>not json</html>", content_type="text/html")

    async def wrong_bytes(request: web.Request) -> web.Response:
        return web.Response(body=b"not the image", content_type="image/png")

    app = web.Application()
    app.router.add_get("/healthz", peer)
    app.router.add_get("/readyz", stall)
    app.router.add_get("/v1/routes", junk)
    app.router.add_get("/v1/attachments/{ref}", wrong_bytes)
    app.router.add_route("*", "/{tail:.*}", gateway)
    server = await aiohttp_server(app)
    # The client's default 30 s: the answers the tests expect arrive however loaded the machine is. Only
    # test_no_answer_in_time_is_timed_out, whose answer never comes, makes a client with a short timeout.
    c = AsyncClient(str(server.make_url("")))
    try:
        yield c, release
    finally:
        release.set()
        await c.close()


async def test_a_proxy_error_page_is_http_status(fake: tuple[AsyncClient, asyncio.Event]) -> None:
    c, _ = fake
    e = await fails(c.get_session("chat-42"))
    assert (e.code, e.status, e.index, e.hint) == ("HTTP_502", 502, None, None)
    assert "502 Bad Gateway" in e.message


async def test_an_unusable_success_answer_is_bad_response(fake: tuple[AsyncClient, asyncio.Event]) -> None:
    c, _ = fake
    e = await fails(c.routes())
    assert (e.code, e.status) == ("BAD_RESPONSE", 200)
    ref = str(Ref.of("sha256", b"the image"))
    e = await fails(c.read(ref))
    assert (e.code, "do not hash" in e.message) == ("BAD_RESPONSE", True)
    async with AsyncClient(c.base_url, verify_reads=False) as trusting:
        assert await trusting.read(ref) == b"not the image"


async def test_no_answer_in_time_is_timed_out(fake: tuple[AsyncClient, asyncio.Event]) -> None:
    c, _ = fake
    # /readyz stalls until the fixture ends: a timeout is the only outcome, so a short one is safe.
    async with AsyncClient(c.base_url, timeout=0.5) as impatient:
        e = await fails(impatient.readyz())
    assert isinstance(e, TimedOut)
    assert isinstance(e, ConnectionFailed)
    assert (e.code, e.status) == ("TIMEOUT", 0)
    assert "within 0.5 s" in e.message


async def test_connections_are_reused(
    fake: tuple[AsyncClient, asyncio.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, _ = fake
    # The client drops a connection idle for KEEPALIVE_SECONDS (5 s): a pause that long between two
    # requests of a loaded machine would open a new one. Read when the client's first request opens its pool.
    monkeypatch.setattr(aio, "KEEPALIVE_SECONDS", 3600.0)
    ports = {(await c.healthz()).status for _ in range(5)}
    assert len(ports) == 1


# --- the host example of docs/clients.md, run as written ---


def _doc_example() -> dict[str, Any]:
    text = (Path(__file__).parents[2] / "docs" / "clients.md").read_text()
    [block] = [b for b in re.finditer(r"```python\n(.*?)```", text, re.S) if "def read_image" in b[1]]
    lines_before = text.count("\n", 0, block.start(1))  # so that a traceback names the line in the page
    namespace: dict[str, Any] = {}
    exec(compile("\n" * lines_before + block[1], "docs/clients.md", "exec"), namespace)
    return namespace


async def test_the_host_example_of_the_docs(ac: AsyncClient, tmp_path: Path) -> None:
    example = _doc_example()
    read_image, on_upload, model_request = (
        example["read_image"],
        example["on_upload"],
        example["model_request"],
    )
    refused = example["UploadRefused"]
    shot = png(24, 16)
    (tmp_path / "shot.png").write_bytes(shot)
    (tmp_path / "notes.txt").write_text("not an image")
    await ac.create_session("chat-v", "vision")
    await ac.create_session("chat-t", "text-only")

    block = await read_image(ac, "chat-v", tmp_path, "shot.png")
    ref = str(Ref.of("sha256", shot))
    assert block == {"type": "image", "ref": ref, "path": "shot.png"}
    assert (await ac.get_session("chat-v")).holds == [ref]
    # The tool call succeeds with a text for the model: a text-only model, a file that is no image.
    degraded = await read_image(ac, "chat-t", tmp_path, "shot.png")
    assert degraded["type"] == "text"
    assert "MODALITY_UNSUPPORTED" in degraded["text"]
    assert "UNSUPPORTED_IMAGE_TYPE" in (await read_image(ac, "chat-v", tmp_path, "notes.txt"))["text"]
    assert "outside the workspace" in (await read_image(ac, "chat-v", tmp_path, "../x.png"))["text"]
    assert "cannot read" in (await read_image(ac, "chat-v", tmp_path, "absent.png"))["text"]

    photo = jpeg(16, 16)
    assert await on_upload(ac, "chat-v", [("photo.jpg", photo)]) == [str(Ref.of("sha256", photo))]
    with pytest.raises(refused, match=r"^doc\.pdf: .*PDF"):
        await on_upload(ac, "chat-v", [("photo.jpg", photo), ("doc.pdf", PDF)])
    with pytest.raises(refused, match="does not accept images"):
        await on_upload(ac, "chat-t", [("photo.jpg", photo)])
    with pytest.raises(AttachstoreClientError, match="SESSION_NOT_FOUND"):
        await on_upload(ac, "absent", [("photo.jpg", photo)])

    messages = [
        {"role": "user", "content": [{"type": "image", "ref": str(Ref.of("sha256", photo))}]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "read_image"}]},
        {"role": "tool", "tool_call_id": "c1", "name": "read_image", "content": [block]},
    ]
    body = await model_request(ac, "chat-v", messages)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user"]


# --- a real daemon: the blocking client and the Unix socket ---


def _config() -> str:
    routes = "".join(
        f'[routes."{r}"]\n' + "".join(f"{k} = {json.dumps(v)}\n" for k, v in spec.items())
        for r, spec in ROUTES.items()
    )
    return f"[admission]\ndecode_workers = 1\n{routes}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with Daemons(tmp_path_factory.mktemp("daemon")) as daemons:
        started = daemons.start(*daemons.store(_config()))
        yield started.url
        started.stop_cleanly()


def test_the_blocking_client_covers_every_endpoint(daemon: str) -> None:
    with Client(daemon) as c:
        assert (c.healthz().status, c.readyz().status) == ("ok", "ready")
        assert [r.id for r in c.routes() if r.declared_by == "config"] == ["text-only", "vision"]
        assert c.route("gpt-4o").accepts_images is True
        shot = png(21, 13)
        [a] = c.admit(Image(shot, "image/png", "shot.png"), source="user").attachments
        assert c.read(a.ref) == shot
        assert c.meta(a.ref) == a
        blob = c.read_response(a.ref)
        assert c.read_response(a.ref, if_none_match=blob.etag).not_modified
        assert c.create_session("sync-1", "vision").holds == []
        assert c.hold("sync-1", [a.ref]).holds == [a.ref]
        assert c.get_session("sync-1").route == "vision"
        assert c.switch_route("sync-1", None).route is None
        assert c.fork("sync-1", "sync-2").holds == [a.ref]
        rendered = c.render(
            [{"role": "user", "content": [{"type": "image", "ref": a.ref}]}],
            provider="anthropic",
            route="vision",
            max_image_bytes=1 << 20,
            max_images=4,
            vision=True,
            session="sync-1",
        )
        assert rendered.summary.included == 1
        assert c.delete_session("sync-1") == 1
        e = c.admit(png(8, 8), source="tool", session="sync-2", route="text-only")
        assert (e.degraded, e.diagnostics[0].code) == (True, "MODALITY_UNSUPPORTED")
        with pytest.raises(AttachstoreClientError) as caught:
            c.get_session("sync-1", request_id="sync-call")
        assert (caught.value.code, caught.value.status, caught.value.request_id) == (
            "SESSION_NOT_FOUND",
            404,
            "sync-call",
        )
    with pytest.raises(RuntimeError, match="closed"):
        c.healthz()
    c.close()  # twice is fine


def test_the_blocking_client_from_several_threads(daemon: str) -> None:
    images = [png(10, 10, seed=s) for s in range(8)]
    refs: dict[int, str] = {}
    with Client(daemon) as c:

        def admit(i: int) -> None:
            refs[i] = c.admit(images[i], source="user").refs[0]

        threads = [threading.Thread(target=admit, args=(i,)) for i in range(len(images))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [c.read(refs[i]) for i in range(len(images))] == images


def test_the_blocking_client_without_a_daemon() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", timeout=5) as c, pytest.raises(ConnectionFailed):
        c.healthz()
    Client().close()  # never used: no thread was started


def test_both_clients_over_a_unix_socket(tmp_path: Path, daemons: Daemons) -> None:
    path = tmp_path / "a.sock"
    daemon = daemons.start(*daemons.store(_config()), unix_socket=path, ready="/healthz")
    with Client(unix_socket=str(path)) as c:
        assert c.healthz().status == "ok"
        shot = png(11, 7)
        ref = c.admit(shot, source="user").refs[0]

    async def over_the_socket() -> bytes:
        # base_url only names the Host header here: every connection goes to the socket.
        async with AsyncClient("http://localhost", unix_socket=str(path)) as ac:
            await ac.create_session("unix-1")
            await ac.hold("unix-1", [ref])
            return await ac.read(ref)

    assert asyncio.run(over_the_socket()) == shot
    daemon.stop_cleanly()
