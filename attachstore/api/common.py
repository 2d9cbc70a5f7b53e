"""What every handler shares: the application keys, JSON in and out, the error envelope."""

from __future__ import annotations

import hashlib
from typing import TypeVar

import msgspec
from aiohttp import web

from ..config import Config
from ..errors import AttachstoreError, InvalidRequest, Unauthorized, UnsupportedMediaType
from ..service import Store
from . import wire
from .bodies import Hold, read_capped

STORE = web.AppKey("store", Store)
CONFIG = web.AppKey("config", Config)
TENANT = web.RequestKey("tenant", str)
TOKENS = web.AppKey("tokens", dict[str, str])  # sha256 of a token -> its tenant
SMALL_BODY = 1 << 20  # every JSON body but an admission's and a render's

T = TypeVar("T")


def tenant_of(request: web.Request) -> str:
    tenant: str = request[TENANT]
    return tenant


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(body=wire.encoder.encode(value), status=status, content_type="application/json")


def error_response(e: AttachstoreError) -> web.Response:
    body = wire.ErrorAnswer(wire.ErrorBody(e.code, e.message, e.index, e.hint))
    response = json_response(body, e.status)
    response.headers.update(e.headers)
    return response


def decode_error(e: msgspec.DecodeError) -> InvalidRequest:
    text = str(e)
    if not isinstance(e, msgspec.ValidationError):
        return InvalidRequest(f"malformed JSON: {text}")
    what, _, where = text.partition(" - at `")  # msgspec: '... - at `$.images[0].data`', nothing at the top
    return InvalidRequest(f"invalid request at {where.rstrip('`') or '$'}: {what}")


async def read_json(
    request: web.Request,
    decoder: msgspec.json.Decoder[T],
    cap: int = SMALL_BODY,
    hint: str | None = None,
    hold: Hold | None = None,
) -> T:
    if request.content_type != "application/json":
        raise UnsupportedMediaType(
            f"{request.method} {request.path} takes application/json, not {request.content_type!r}",
            hint="send the body as JSON with the header Content-Type: application/json",
        )
    within = request.app[CONFIG].http.read_timeout_seconds
    hint = hint or "this request is larger than any valid one"
    body = await read_capped(request, cap, within, hint, hold)
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as e:
        raise decode_error(e) from None
    except RecursionError:  # msgspec recurses once per level of nesting, up to the interpreter's limit
        raise InvalidRequest(
            "malformed JSON: nested too deeply to decode",
            hint="nest JSON values at most a few dozen levels deep",
        ) from None


def tenant_for(tokens: dict[str, str], authorization: str) -> str:
    scheme, _, token = authorization.partition(" ")
    tenant = None
    if scheme.lower() == "bearer":
        # a header's bytes that are not UTF-8 came as lone surrogates: hashed as the bytes the client sent
        sent = token.strip().encode("utf-8", "surrogateescape")
        tenant = tokens.get(hashlib.sha256(sent).hexdigest())
    if tenant is None:
        raise Unauthorized("a valid bearer token is required", hint="send Authorization: Bearer <token>")
    return tenant
