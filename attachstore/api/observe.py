"""What operators see of the HTTP edge: a request id, one JSON log line and a latency sample per request,
and GET /metrics."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from .. import logs
from ..metrics import Metrics
from .bodies import BODY_BYTES, PARTS
from .common import STORE, TENANT

log = logging.getLogger("attachstore.access")
ERROR_CODE = web.RequestKey("error_code", str)
REQUEST_ID = web.RequestKey("request_id", str)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CLIENT_GONE = 499  # the status logged for a request whose client disconnected before its answer (as nginx)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Ids:
    """A random prefix per process and a counter: unique, which is all an id must be, without a system call
    each."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._next = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._next):016x}"


_new_id = _Ids()


@web.middleware
async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
    request[REQUEST_ID] = rid = request_id(request.headers.get("X-Request-Id"))
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        response.headers["X-Request-Id"] = rid
        return response
    except web.HTTPException as e:  # redirects and the like pass through the error envelope
        status = e.status
        e.headers["X-Request-Id"] = rid
        raise
    except asyncio.CancelledError:  # the client left (or shutdown cut the request off): nobody is answered
        status = CLIENT_GONE
        raise
    finally:
        resource = request.match_info.route.resource
        body = request.method == "POST"
        # Only what this request can have: a GET has no body, a success no error code (each missing key is
        # a KeyError inside request.get).
        record(
            request.app[STORE].metrics,
            rid,
            request.method,
            resource.canonical if resource is not None else "unmatched",
            status,
            time.perf_counter() - started,
            code=request.get(ERROR_CODE) if status >= 400 else None,
            tenant=request.get(TENANT),
            ref=request.match_info.get("ref", "")[:140] or None,
            body_bytes=request.get(BODY_BYTES) if body else None,
            parts=request.get(PARTS) if body else None,
        )


def request_id(given: str | None) -> str:
    return given if given is not None and _REQUEST_ID.fullmatch(given) else _new_id()


def record(
    metrics: Metrics,
    request_id: str,
    method: str,
    endpoint: str,
    status: int,
    elapsed: float,
    *,
    code: str | None = None,
    tenant: str | None = None,
    ref: str | None = None,
    body_bytes: int | None = None,
    parts: int | None = None,
) -> None:
    metrics.request_child(method, endpoint, status).observe(elapsed)
    fields = logs.fields(  # in the line's order; those left at None are absent from it
        request_id=request_id,
        method=method,
        endpoint=endpoint,
        status=status,
        code=code,
        duration_ms=round(elapsed * 1000, 3),
        tenant=tenant,
        ref=ref,
        body_bytes=body_bytes,
        parts=parts,
    )
    log.info("request", extra=fields)


async def metrics(request: web.Request) -> web.Response:
    store = request.app[STORE]
    m = store.metrics
    objects, size = await store.stats()
    m.objects.set(objects)
    m.stored_bytes.set(size)
    for command, (finished_at, figures) in (await store.runs()).items():
        m.last_run.labels(command).set(finished_at)
        for figure, value in figures.items():
            m.last_run_result.labels(command, figure).set(value)
    registry = m.registry
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # serve --workers N: every worker's samples, summed
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    response = web.Response(body=generate_latest(registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response
