"""Where `attachstore mcp` keeps the images: a `Store` opened on the data dir (`Local`), or a running daemon
through the HTTP client (`Remote`). Both admit into one session, a file with source `tool` and the images
of an MCP result as one batch with source `mcp`, and both take the bytes an image block carries from render,
for the session's route (or `--route`): the stored image, or its request variant where the route has limits
(docs/normalization.md), exactly as a model request would."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..config import Config
from ..errors import AttachstoreError, InvalidRequest, SessionConflict, SessionNotFound
from ..vocabulary import daemon_url

# Imported where used: the store (with the gate and Pillow), render and the HTTP client (aiohttp) are not
# needed to answer `initialize`, and a host gives a server little time to start (docs/performance.md).
if TYPE_CHECKING:
    from ..client import Admission as Answer
    from ..client import AsyncClient
    from ..service import Admission, Store, Upload

log = logging.getLogger(__name__)

T = TypeVar("T")
# A daemon's limits are its own: a file up to this size is sent, and the daemon decides (fit's source
# bound is 32 MiB by default, and a daemon's admission body cap a little over that).
REMOTE_FILE_BYTES = 64 * 1024 * 1024
_METAS_AT_ONCE = 16  # resources/list over HTTP: one meta request per ref


@dataclass(frozen=True, slots=True)
class Stored:
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    name: str | None = None
    # What admission normalized (oversize = "fit"): the upload's type, size and sides, and what it did.
    normalized_from: str | None = None


@dataclass(frozen=True, slots=True)
class SentImage:
    media_type: str
    data: str
    width: int
    height: int


class Backend(Protocol):
    file_bytes: int  # read_image refuses a larger file before reading it

    async def admit(self, data: bytes, name: str) -> Stored | str:
        """Admitted into the session with source `tool`, or the soft rejection's text for the model."""

    async def admit_mcp(self, images: Sequence[Upload]) -> list[Stored] | str:
        """The images of one MCP result admitted as one batch with source `mcp`: each stored, in order, or
        the soft rejection's text for the model (SPEC section 5)."""

    async def sent_image(self, ref: str) -> SentImage | str: ...

    async def sent_images(self, refs: Sequence[str]) -> list[SentImage | str]:
        """What one model request on the route carries for these images together: each the stored image or
        its request variant, or render's placeholder where it is left out (the oldest first, past the
        route's request budget)."""

    async def meta(self, ref: str) -> Stored:
        """Raises AttachstoreError (ATTACHMENT_NOT_FOUND for a ref the tenant may not see)."""

    async def held(self) -> list[Stored]:
        """The session's holds, in the order they were first held; none before the session exists."""

    async def blob(self, ref: str) -> tuple[str, bytes]: ...

    async def close(self) -> None: ...


def sent_images_of(body: dict[str, Any]) -> list[SentImage | str]:
    """The images of an Anthropic render body of user messages of one image each (merged into one message),
    each as sent, or the placeholder in its place."""
    from ..gate import probe_header  # where used: see the imports above

    sent: list[SentImage | str] = []
    for block in body["messages"][0]["content"]:
        if block.get("type") != "image":
            sent.append(str(block.get("text", "")))
            continue
        source = block["source"]
        head = probe_header(base64.b64decode(source["data"]))
        width, height = (head.width, head.height) if head is not None else (0, 0)
        sent.append(SentImage(source["media_type"], source["data"], width, height))
    return sent


def _stored(answer: Admission | Answer) -> list[Stored] | str:
    if answer.degraded:
        return answer.text or "The image was not attached."
    return [
        Stored(r.ref, r.media_type, r.bytes, r.width, r.height, r.name, _normalized_from(r.normalized))
        for r in answer.attachments
    ]


def _normalized_from(normalized: Any) -> str | None:
    if normalized is None:
        return None
    o = normalized.original
    return f"{o.media_type} {o.width}x{o.height}, {o.bytes:,} bytes ({', '.join(normalized.steps)})"


class _Session:
    """The session read_image admits into: looked up at first use, created (with `--route`, and with the
    idle lifetime `ttl` in seconds) if missing. An existing session keeps its own lifetime."""

    def __init__(self, id: str, route: str | None, ttl: int | None = None) -> None:
        self.id = id
        self.route = route
        self.ttl = ttl
        self._ready = False
        self._lock = asyncio.Lock()

    async def within(
        self,
        get: Callable[[], Awaitable[object]],
        create: Callable[[], Awaitable[object]],
        call: Callable[[], Awaitable[T]],
    ) -> T:
        """`call` in the session: made first if it is missing, and made again if it was deleted meanwhile
        (its holds released, say, with `attachstore session delete`)."""
        await self._ensure(get, create)
        try:
            return await call()
        except AttachstoreError as e:
            if e.code != SessionNotFound.code:
                raise
        self._ready = False
        await self._ensure(get, create)
        return await call()

    async def _ensure(
        self, get: Callable[[], Awaitable[object]], create: Callable[[], Awaitable[object]]
    ) -> None:
        async with self._lock:
            if self._ready:
                return
            try:
                await get()
            except AttachstoreError as e:
                if e.code != SessionNotFound.code:
                    raise
                try:
                    await create()
                except AttachstoreError as e:  # made meanwhile by another process, on another route
                    if e.code != SessionConflict.code:
                        raise
            self._ready = True


class Local:
    """A Store on the data dir, opened at the first call (a host may start a server only to list its
    tools, or start one and kill it at once), with one decode worker, like the other local commands."""

    def __init__(
        self, config: Config, session: str, route: str | None, tenant: str = "", ttl: int | None = None
    ) -> None:
        self.config = config
        self.tenant = tenant
        self.session = _Session(session, route, ttl)
        self.file_bytes = config.admission.upload_limits(config.limits).max_image_bytes
        self._store: Store | None = None
        self._opening = asyncio.Lock()

    async def store(self) -> Store:
        from ..service import Store  # where used: see the imports above

        async with self._opening:
            if self._store is None:
                self._store = await Store.open(self.config, workers=1, read_cache=False)
            return self._store

    async def admit(self, data: bytes, name: str) -> Stored | str:
        from ..service import Upload  # where used: see the imports above

        stored = await self._admit([Upload.of_bytes(data, None, name)], "tool")
        return stored if isinstance(stored, str) else stored[0]

    async def admit_mcp(self, images: Sequence[Upload]) -> list[Stored] | str:
        return await self._admit(images, "mcp")

    async def _admit(self, uploads: Sequence[Upload], source: str) -> list[Stored] | str:
        store = await self.store()
        key, route = (self.tenant, self.session.id), self.session.route
        answer = await self.session.within(
            lambda: store.sessions.get(key),
            lambda: store.sessions.create(key, route, self.session.ttl),
            lambda: store.admit(uploads, source, route=route, session=key[1], tenant=key[0]),
        )
        return _stored(answer)

    async def sent_image(self, ref: str) -> SentImage | str:
        return (await self.sent_images([ref]))[0]

    async def sent_images(self, refs: Sequence[str]) -> list[SentImage | str]:
        from ..render import ImageBlock, MessageIn, RenderRequest, render  # where used: see the imports above

        store = await self.store()
        messages = [MessageIn("user", [ImageBlock(ref)]) for ref in refs]
        route, session = self.session.route, self.session.id
        try:  # the session's route, unless --route names one
            rendered = await render(
                store, RenderRequest(messages, "anthropic", route, session), tenant=self.tenant
            )
        except SessionNotFound:  # read_attachment before the first read_image: --route alone
            rendered = await render(store, RenderRequest(messages, "anthropic", route), tenant=self.tenant)
        return sent_images_of(rendered.body)

    async def meta(self, ref: str) -> Stored:
        r = await (await self.store()).meta(ref, self.tenant)
        return Stored(r.ref, r.media_type, r.bytes, r.width, r.height, r.name)

    async def held(self) -> list[Stored]:
        store = await self.store()
        try:
            session = await store.sessions.get((self.tenant, self.session.id))
        except SessionNotFound:
            return []
        rows = await store.rows(session.holds, store.scope(self.tenant)) if session.holds else {}
        return [
            Stored(r.ref, r.media_type, r.bytes, r.width, r.height, r.name)
            for ref in session.holds
            if (r := rows.get(ref)) is not None
        ]

    async def blob(self, ref: str) -> tuple[str, bytes]:
        r, data = await (await self.store()).read(ref, self.tenant)
        return r.media_type, bytes(data)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()


class Remote:
    def __init__(
        self, url: str, token: str | None, session: str, route: str | None, ttl: int | None = None
    ) -> None:
        # The URL is checked now, so that a bad --url is an error at start-up; the client (and aiohttp) is
        # made at the first call, after the server has answered `initialize`.
        self.url = daemon_url(url, "base_url")
        self.token = token
        self._client: AsyncClient | None = None
        self.session = _Session(session, route, ttl)
        self.file_bytes = REMOTE_FILE_BYTES

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            from ..client import AsyncClient  # where used: see the imports above

            self._client = AsyncClient(self.url, token=self.token, timeout=120.0)
        return self._client

    async def _create(self) -> object:
        """The session, with its lifetime. A daemon older than lifetimes refuses the field (INVALID_REQUEST,
        "unknown field `ttl`"): the session is then made without one, as that daemon makes every session,
        and the log says so."""
        c, s = self.client, self.session
        try:
            return await c.create_session(s.id, s.route, ttl=s.ttl)
        except AttachstoreError as e:
            if s.ttl is None or e.code != InvalidRequest.code or "`ttl`" not in e.message:
                raise
        log.warning(
            "the daemon at %s keeps no session lifetimes (older than attachstore's lifetimes): session %s is "
            "made without one, and its images stay until it is deleted",
            self.url,
            s.id,
        )
        return await c.create_session(s.id, s.route)

    async def admit(self, data: bytes, name: str) -> Stored | str:
        from ..client import Image  # where used: see the imports above

        c, s = self.client, self.session
        answer = await s.within(
            lambda: c.get_session(s.id),
            self._create,
            lambda: c.admit(Image(data, None, name), source="tool", route=s.route, session=s.id),
        )
        stored = _stored(answer)
        return stored if isinstance(stored, str) else stored[0]

    async def admit_mcp(self, images: Sequence[Upload]) -> list[Stored] | str:
        # POST /v1/mcp/results, with a result made of these images alone: the daemon reads and admits them as
        # it would the server's own result.
        c, s = self.client, self.session
        result = {"content": [_block(u) for u in images]}
        answer = await s.within(
            lambda: c.get_session(s.id),
            self._create,
            lambda: c.admit_mcp_result(result, route=s.route, session=s.id),
        )
        return _stored(answer)

    async def sent_image(self, ref: str) -> SentImage | str:
        return (await self.sent_images([ref]))[0]

    async def sent_images(self, refs: Sequence[str]) -> list[SentImage | str]:
        from ..client import AttachstoreClientError  # where used: see the imports above

        messages = [{"role": "user", "content": [{"type": "image", "ref": ref}]} for ref in refs]
        route, session = self.session.route, self.session.id
        try:  # the session's route, unless --route names one
            rendered = await self.client.render(messages, provider="anthropic", route=route, session=session)
        except AttachstoreClientError as e:
            if e.code != SessionNotFound.code:
                raise
            rendered = await self.client.render(messages, provider="anthropic", route=route)
        return sent_images_of(rendered.body)

    async def meta(self, ref: str) -> Stored:
        a = await self.client.meta(ref)
        return Stored(a.ref, a.media_type, a.bytes, a.width, a.height, a.name)

    async def held(self) -> list[Stored]:
        from ..client import AttachstoreClientError  # where used: see the imports above

        try:
            session = await self.client.get_session(self.session.id)
        except AttachstoreClientError as e:
            if e.code == SessionNotFound.code:
                return []
            raise
        metas = await _bounded([self._meta_or_none(ref) for ref in session.holds], _METAS_AT_ONCE)
        return [m for m in metas if m is not None]

    async def _meta_or_none(self, ref: str) -> Stored | None:
        from ..client import AttachstoreClientError  # where used: see the imports above

        try:
            return await self.meta(ref)
        except AttachstoreClientError as e:
            if e.code == "ATTACHMENT_NOT_FOUND":  # collected since the session listed it
                return None
            raise

    async def blob(self, ref: str) -> tuple[str, bytes]:
        blob = await self.client.read_response(ref)
        return blob.media_type or "application/octet-stream", blob.data or b""

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _block(image: Upload) -> dict[str, Any]:
    # An image named by a uri came as a resource's blob; one without, as an image block.
    if image.name is None or image.media_type is None:
        typed = {} if image.media_type is None else {"mimeType": image.media_type}
        return {"type": "image", "data": image.payload, **typed}
    resource = {"uri": image.name, "mimeType": image.media_type, "blob": image.payload}
    return {"type": "resource", "resource": resource}


async def _bounded(calls: Sequence[Awaitable[T]], at_once: int) -> list[T]:
    room = asyncio.Semaphore(at_once)

    async def one(call: Awaitable[T]) -> T:
        async with room:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))
