"""Client: the AsyncClient's methods for code without an event loop.

It runs an AsyncClient on a private event loop in one background thread, so both clients share one
implementation (multipart, errors, Unix sockets) and the blocking one reuses its connections too. A Client may
be called from several threads at once; each call blocks only its caller."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import msgspec

from .aio import AsyncClient, Images
from .listings import every
from .models import (
    Admission,
    Attachment,
    AttachmentPage,
    Blob,
    HeldAttachment,
    McpResult,
    Provider,
    Rendered,
    RouteInfo,
    Session,
    SessionPage,
    SessionSummary,
    Source,
    Stats,
    Status,
)

if TYPE_CHECKING:
    from .models import RouteResolution

P = ParamSpec("P")
T = TypeVar("T")


class Client:
    """A blocking client of one attachstore daemon. Use it as `with Client() as c:`, or call `close()`."""

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
        self._async = AsyncClient(
            base_url,
            token=token,
            unix_socket=unix_socket,
            timeout=timeout,
            headers=headers,
            verify_reads=verify_reads,
        )
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def base_url(self) -> str:
        return self._async.base_url

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and stop the background thread. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._async.close(), loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("the attachstore client is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # A daemon thread: a Client that is never closed does not keep the process alive.
                thread = threading.Thread(target=_serve, args=(loop,), name="attachstore-client", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _call(self, method: Callable[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = self._started()  # before the coroutine exists: a closed client leaves none un-awaited
        future: Future[T] = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # interrupted (KeyboardInterrupt): do not leave the request running
            raise

    def admit(
        self,
        images: Images,
        *,
        source: Source,
        route: str | None = None,
        session: str | None = None,
        request_id: str | None = None,
    ) -> Admission:
        return self._call(
            self._async.admit, images, source=source, route=route, session=session, request_id=request_id
        )

    def admit_mcp_result(
        self,
        result: Mapping[str, Any],
        *,
        route: str | None = None,
        session: str | None = None,
        request_id: str | None = None,
    ) -> McpResult:
        return self._call(
            self._async.admit_mcp_result, result, route=route, session=session, request_id=request_id
        )

    def read(self, ref: str, *, request_id: str | None = None) -> bytes:
        return self._call(self._async.read, ref, request_id=request_id)

    def read_response(
        self, ref: str, *, if_none_match: str | None = None, request_id: str | None = None
    ) -> Blob:
        return self._call(self._async.read_response, ref, if_none_match=if_none_match, request_id=request_id)

    def preview(
        self,
        ref: str,
        size: int = 256,
        *,
        if_none_match: str | None = None,
        request_id: str | None = None,
    ) -> Blob:
        return self._call(self._async.preview, ref, size, if_none_match=if_none_match, request_id=request_id)

    def meta(self, ref: str, *, request_id: str | None = None) -> Attachment:
        return self._call(self._async.meta, ref, request_id=request_id)

    def render(
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
        return self._call(
            self._async.render,
            messages,
            provider=provider,
            route=route,
            session=session,
            max_image_bytes=max_image_bytes,
            max_images=max_images,
            vision=vision,
            request_id=request_id,
        )

    def create_session(
        self, id: str, route: str | None = None, *, ttl: int | None = None, request_id: str | None = None
    ) -> Session:
        return self._call(self._async.create_session, id, route, ttl=ttl, request_id=request_id)

    def get_session(self, id: str, *, request_id: str | None = None) -> Session:
        return self._call(self._async.get_session, id, request_id=request_id)

    def switch_route(self, id: str, route: str | None, *, request_id: str | None = None) -> Session:
        return self._call(self._async.switch_route, id, route, request_id=request_id)

    def fork(self, id: str, new_id: str, *, request_id: str | None = None) -> Session:
        return self._call(self._async.fork, id, new_id, request_id=request_id)

    def hold(self, id: str, refs: Iterable[str], *, request_id: str | None = None) -> Session:
        return self._call(self._async.hold, id, list(refs), request_id=request_id)

    def delete_session(self, id: str, *, request_id: str | None = None) -> int:
        return self._call(self._async.delete_session, id, request_id=request_id)

    def routes(self, *, request_id: str | None = None) -> list[RouteInfo]:
        return self._call(self._async.routes, request_id=request_id)

    def route(self, model: str, *, request_id: str | None = None) -> RouteResolution:
        return self._call(self._async.route, model, request_id=request_id)

    def healthz(self, *, request_id: str | None = None) -> Status:
        return self._call(self._async.healthz, request_id=request_id)

    def readyz(self, *, request_id: str | None = None) -> Status:
        return self._call(self._async.readyz, request_id=request_id)

    # --- listings and totals ---

    def sessions_page(
        self,
        *,
        prefix: str | None = None,
        expired: bool | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        request_id: str | None = None,
    ) -> SessionPage:
        return self._call(
            self._async.sessions_page,
            prefix=prefix,
            expired=expired,
            limit=limit,
            cursor=cursor,
            request_id=request_id,
        )

    def list_sessions(
        self, *, prefix: str | None = None, expired: bool | None = None, page_size: int | None = None
    ) -> Iterator[SessionSummary]:
        """Every session, newest used first, fetching a page at a time as the iteration reaches it."""

        def page(cursor: str | None) -> tuple[list[SessionSummary], str | None]:
            found = self.sessions_page(prefix=prefix, expired=expired, limit=page_size, cursor=cursor)
            return found.sessions, found.next

        return every(page)

    def attachments_page(
        self, id: str, *, limit: int | None = None, cursor: str | None = None, request_id: str | None = None
    ) -> AttachmentPage:
        return self._call(self._async.attachments_page, id, limit=limit, cursor=cursor, request_id=request_id)

    def session_attachments(self, id: str, *, page_size: int | None = None) -> Iterator[HeldAttachment]:
        """Everything session `id` holds, oldest held first, a page at a time."""

        def page(cursor: str | None) -> tuple[list[HeldAttachment], str | None]:
            found = self.attachments_page(id, limit=page_size, cursor=cursor)
            return found.attachments, found.next

        return every(page)

    def stats(self, *, request_id: str | None = None) -> Stats:
        return self._call(self._async.stats, request_id=request_id)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
