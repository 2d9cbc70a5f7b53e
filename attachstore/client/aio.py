"""AsyncClient: every endpoint of the HTTP API (docs/api.md) as a typed method, over one aiohttp session whose
connections are reused from call to call."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import aiohttp
import msgspec
from multidict import CIMultiDictProxy
from yarl import URL

from .. import __version__
from ..errors import AttachstoreError
from ..refs import Ref
from ..vocabulary import daemon_url
from .errors import ConnectionFailed, TimedOut, bad_response, error_of
from .listings import AsyncListings
from .models import (
    Admission,
    Attachment,
    Blob,
    Image,
    McpResult,
    Provider,
    Released,
    Rendered,
    RouteInfo,
    RouteResolution,
    Routes,
    Session,
    Source,
    Status,
)

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8731"
URL_ENV, TOKEN_ENV = "ATTACHSTORE_URL", "ATTACHSTORE_TOKEN"  # what the client reads when not given them
# The client drops an idle connection well before the daemon's keepalive_timeout (15 s by default) would:
# a POST sent on a connection the daemon is closing at that moment fails and is not retried.
KEEPALIVE_SECONDS = 5.0
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_encoder = msgspec.json.Encoder()
_admission = msgspec.json.Decoder(Admission)
_attachment = msgspec.json.Decoder(Attachment)
_session = msgspec.json.Decoder(Session)
_released = msgspec.json.Decoder(Released)
_routes = msgspec.json.Decoder(Routes)
_resolution = msgspec.json.Decoder(RouteResolution)
_rendered = msgspec.json.Decoder(Rendered)
_status = msgspec.json.Decoder(Status)
_mcp_result = msgspec.json.Decoder(McpResult)

Images = Image | bytes | Sequence[Image | bytes]


class _Answer(NamedTuple):
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


def _segment(value: str) -> str:
    quoted = quote(value, safe=":")
    # "." and ".." are valid session ids, but every URL library removes them as dot segments (RFC 3986 5.2.4).
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def _filename(name: str | None) -> str:
    # A header cannot carry control characters (the daemon drops them from names anyway) or lone surrogates.
    return _CONTROL.sub("", name or "").encode("utf-8", "replace").decode("utf-8")


def _form(images: Images, fields: Mapping[str, str | None]) -> aiohttp.MultipartWriter:
    """Multipart, not JSON: the bytes travel as they are, without base64's extra third to send and decode."""
    form = aiohttp.MultipartWriter("form-data")
    for name, value in fields.items():
        if value is not None:
            form.append(value).set_content_disposition("form-data", name=name)
    items = [images] if isinstance(images, Image | bytes) else images
    for item in items:
        image = item if isinstance(item, Image) else Image(item)
        declared = image.media_type or "application/octet-stream"  # "not declared", to the daemon
        part = form.append(io.BytesIO(image.data), {"Content-Type": declared})
        # A part with a filename is an image, and its filename is the name: "" for none (the daemon reads it
        # as null). Sent as UTF-8, unquoted: the daemon reads aiohttp's default percent-encoding literally.
        part.set_content_disposition(
            "form-data", name="image", filename=_filename(image.name), quote_fields=False
        )
    return form


def _verified(ref: str, data: bytes) -> bool:
    try:
        return Ref.parse(ref).matches(data)
    except AttachstoreError:
        return False


class AsyncClient(AsyncListings):
    """A client of one attachstore daemon. Use it as `async with AsyncClient() as c:`, or call `close()`.
    Without `base_url` it reads $ATTACHSTORE_URL (else DEFAULT_URL), without `token` $ATTACHSTORE_TOKEN.

    The aiohttp session is made at the first call (or `__aenter__`) and belongs to that event loop."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        unix_socket: str | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        verify_reads: bool = True,
    ) -> None:
        if base_url is None:
            base_url = os.environ.get(URL_ENV) or DEFAULT_URL
            given = f"${URL_ENV}"
        else:
            given = "base_url"
        if token is None:
            token = os.environ.get(TOKEN_ENV)
        self.base_url = daemon_url(base_url, given)
        self.unix_socket = unix_socket
        self.timeout = timeout
        self.verify_reads = verify_reads
        self._headers = {"User-Agent": f"attachstore-client/{__version__}", **(headers or {})}
        if token:  # "" sends none, whatever the environment holds
            self._headers["Authorization"] = f"Bearer {token}"
        self._http: aiohttp.ClientSession | None = None
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        self._session()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the attachstore client is closed")
        if self._http is None:
            connector: aiohttp.BaseConnector = (
                aiohttp.UnixConnector(self.unix_socket, keepalive_timeout=KEEPALIVE_SECONDS)
                if self.unix_socket
                else aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS)
            )
            self._http = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._http

    @property
    def _where(self) -> str:
        return f"the Unix socket {self.unix_socket}" if self.unix_socket else self.base_url

    async def _send(
        self,
        method: str,
        path: Sequence[str],
        *,
        body: bytes | aiohttp.MultipartWriter | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        expect: tuple[int, ...] = (200, 201),
        query: Mapping[str, str] | None = None,
    ) -> _Answer:
        url = URL(self.base_url + "/" + "/".join(_segment(p) for p in path), encoded=True)
        if query:
            url = url.update_query(query)
        sent = dict(headers or {})
        if isinstance(body, bytes):
            sent["Content-Type"] = "application/json"
        # A stream, not bytes: aiohttp warns about a large bytes body (it would write it in one piece).
        data = io.BytesIO(body) if isinstance(body, bytes) else body
        if request_id is not None:
            sent["X-Request-Id"] = request_id
        try:
            async with self._session().request(
                method, url, data=data, headers=sent, allow_redirects=False
            ) as response:
                answer = _Answer(response.status, response.headers, await response.read())
                reason = response.reason
        except TimeoutError as e:
            raise TimedOut(
                f"{method} {url.path}: no answer from {self._where} within {self.timeout:g} s"
            ) from e
        except aiohttp.ClientError as e:
            raise ConnectionFailed(
                f"{method} {url.path}: no answer from attachstore at {self._where}: {e}"
            ) from e
        if answer.status not in expect:
            raise error_of(answer.status, reason, answer.headers, answer.body)
        return answer

    async def _json(
        self,
        decoder: msgspec.json.Decoder[T],
        method: str,
        path: Sequence[str],
        payload: object = None,
        request_id: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> T:
        body = None if payload is None else _encoder.encode(payload)
        return _decode(decoder, await self._send(method, path, body=body, request_id=request_id, query=query))

    # --- attachments ---

    async def admit(
        self,
        images: Images,
        *,
        source: Source,
        route: str | None = None,
        session: str | None = None,
        request_id: str | None = None,
    ) -> Admission:
        """Admit a batch, all or nothing. A rejection is an exception for `user` and `command`, and a
        `degraded` answer (not an exception) for `tool` and `mcp`."""
        form = _form(images, {"source": source, "route": route, "session": session})
        answer = await self._send("POST", ("v1", "attachments"), body=form, request_id=request_id)
        return _decode(_admission, answer)

    async def admit_mcp_result(
        self,
        result: Mapping[str, Any],
        *,
        route: str | None = None,
        session: str | None = None,
        request_id: str | None = None,
    ) -> McpResult:
        """Admit the images of an MCP CallToolResult (a JSON object, as its server sent it) as one `mcp`
        batch; the answer holds the same result with each image a ref. A rejection is a `degraded` answer
        whose result carries the text for the model, not an exception."""
        options = {"route": route, "session": session}
        payload = {"result": result, **{k: v for k, v in options.items() if v is not None}}
        return await self._json(_mcp_result, "POST", ("v1", "mcp", "results"), payload, request_id)

    async def read(self, ref: str, *, request_id: str | None = None) -> bytes:
        """The bytes of `ref`, verified by the daemon (and, with `verify_reads`, hashed again here)."""
        blob = await self.read_response(ref, request_id=request_id)
        if blob.data is None:  # only with If-None-Match, which read() does not send
            raise bad_response(304, {}, "304 Not Modified to an unconditional GET")
        return blob.data

    async def read_response(
        self, ref: str, *, if_none_match: str | None = None, request_id: str | None = None
    ) -> Blob:
        """`read` with the answer's type and ETag. With `if_none_match` (an ETag such as `blob.etag`), a
        matching object answers 304 without its bytes: `data` is None."""
        headers = {"If-None-Match": if_none_match} if if_none_match else None
        answer = await self._send(
            "GET", ("v1", "attachments", ref), headers=headers, request_id=request_id, expect=(200, 304)
        )
        etag = answer.headers.get("ETag")
        if answer.status == 304:
            return Blob(ref, None, None, etag)
        if self.verify_reads and not _verified(ref, answer.body):
            raise bad_response(answer.status, answer.headers, f"the bytes received do not hash to {ref}")
        return Blob(ref, answer.body, answer.headers.get("Content-Type"), etag)

    async def preview(
        self,
        ref: str,
        size: int = 256,
        *,
        if_none_match: str | None = None,
        request_id: str | None = None,
    ) -> Blob:
        """A small still image of `ref` for a UI, its longer side at most `size` (64, 128, 256 or 512). The
        `Blob`'s `ref` is the preview's own (its ETag), and with `verify_reads` its bytes are hashed again
        against it. With `if_none_match` (a previous `blob.etag`), an unchanged preview answers 304: `data`
        is None."""
        headers = {"If-None-Match": if_none_match} if if_none_match else None
        answer = await self._send(
            "GET",
            ("v1", "attachments", ref, "preview"),
            headers=headers,
            request_id=request_id,
            expect=(200, 304),
            query={"size": str(size)},
        )
        etag = answer.headers.get("ETag")
        own = (etag or "").strip('"')
        if answer.status == 304:
            return Blob(own, None, None, etag)
        if self.verify_reads and not _verified(own, answer.body):
            raise bad_response(answer.status, answer.headers, f"the preview's bytes do not hash to {etag}")
        return Blob(own, answer.body, answer.headers.get("Content-Type"), etag)

    async def meta(self, ref: str, *, request_id: str | None = None) -> Attachment:
        return await self._json(_attachment, "GET", ("v1", "attachments", ref, "meta"), request_id=request_id)

    # --- render ---

    async def render(
        self,
        messages: Sequence[Mapping[str, Any] | msgspec.Struct],
        *,
        provider: Provider | None = None,
        route: str | None = None,
        session: str | None = None,
        max_image_bytes: int | None = None,
        max_images: int | None = None,
        vision: bool | None = None,
        request_id: str | None = None,
    ) -> Rendered:
        """`messages` in the neutral format of docs/render.md: dicts, or `attachstore.render.MessageIn`."""
        options = {
            "provider": provider,
            "route": route,
            "session": session,
            "max_image_bytes": max_image_bytes,
            "max_images": max_images,
            "vision": vision,
        }
        payload = {"messages": messages, **{k: v for k, v in options.items() if v is not None}}
        return await self._json(_rendered, "POST", ("v1", "render"), payload, request_id)

    # --- sessions ---

    async def create_session(
        self, id: str, route: str | None = None, *, ttl: int | None = None, request_id: str | None = None
    ) -> Session:
        """Create a session; the same route again answers it as it is (idempotent). `ttl`: its idle lifetime
        in seconds, renewed by every use (given to an existing session, it replaces the one it had)."""
        body: dict[str, object] = {"route": route} if ttl is None else {"route": route, "ttl": ttl}
        return await self._json(_session, "PUT", ("v1", "sessions", id), body, request_id)

    async def get_session(self, id: str, *, request_id: str | None = None) -> Session:
        return await self._json(_session, "GET", ("v1", "sessions", id), request_id=request_id)

    async def switch_route(self, id: str, route: str | None, *, request_id: str | None = None) -> Session:
        """Switch the session's route (None clears it), under the switch guard (ROUTE_SWITCH_REJECTED)."""
        return await self._json(
            _session, "POST", ("v1", "sessions", id, "route"), {"route": route}, request_id
        )

    async def fork(self, id: str, new_id: str, *, request_id: str | None = None) -> Session:
        """Copy the session and its holds to `new_id`; answers the new session."""
        return await self._json(
            _session, "POST", ("v1", "sessions", id, "fork"), {"session": new_id}, request_id
        )

    async def hold(self, id: str, refs: Iterable[str], *, request_id: str | None = None) -> Session:
        """Hold refs that already exist (at most 1000 per call), all or none."""
        return await self._json(
            _session, "POST", ("v1", "sessions", id, "holds"), {"refs": list(refs)}, request_id
        )

    async def delete_session(self, id: str, *, request_id: str | None = None) -> int:
        """Release the session's holds and forget it; answers how many holds were released."""
        released = await self._json(_released, "DELETE", ("v1", "sessions", id), request_id=request_id)
        return released.released

    # --- the daemon ---

    async def routes(self, *, request_id: str | None = None) -> list[RouteInfo]:
        """Every declaration: the configured routes (`declared_by` "config"), then the catalog's entries."""
        return (await self._json(_routes, "GET", ("v1", "routes"), request_id=request_id)).routes

    async def route(self, model: str, *, request_id: str | None = None) -> RouteResolution:
        """How `model` resolves: its configured route, else its catalog entry, else unknown."""
        return await self._json(_resolution, "GET", ("v1", "routes", model), request_id=request_id)

    async def healthz(self, *, request_id: str | None = None) -> Status:
        return await self._json(_status, "GET", ("healthz",), request_id=request_id)

    async def readyz(self, *, request_id: str | None = None) -> Status:
        """Ready, or AttachstoreClientError with code STORAGE_UNAVAILABLE (503)."""
        return await self._json(_status, "GET", ("readyz",), request_id=request_id)


def _decode(decoder: msgspec.json.Decoder[T], answer: _Answer) -> T:
    try:
        return decoder.decode(answer.body)
    except msgspec.DecodeError as e:
        raise bad_response(answer.status, answer.headers, str(e)) from None
