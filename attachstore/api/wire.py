"""Wire shapes of the HTTP API (SPEC section 8), decoded and encoded with msgspec. A struct's docstring is its
description in GET /openapi.json, which tests/api/test_openapi_pinned.py pins."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ..service import SESSION_ID_PATTERN
from ..vocabulary import MAX_SESSION_TTL

SessionId = Annotated[str, Meta(pattern=SESSION_ID_PATTERN)]
RouteId = Annotated[str, Meta(min_length=1, max_length=256)]
RefText = str  # any string: the service's Ref.parse refuses what is not a ref, as INVALID_ATTACHMENT_REF


class _In(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    pass


class ImageIn(_In, frozen=True):
    data: str
    media_type: Annotated[str, Meta(max_length=255)] | None = None
    name: Annotated[str, Meta(max_length=4096)] | None = None


# More images than this in one body are refused as it is decoded: each costs a struct and, for a tool's
# batch over max_batch_images, a diagnostic in the answer (config.Limits caps max_batch_images below it).
MAX_IMAGES = 1024


class AdmitRequest(_In, frozen=True):
    images: Annotated[list[ImageIn], Meta(max_length=MAX_IMAGES)]
    # Required, but checked by the service, so that a JSON body and a form without it get the same answer.
    source: str | None = None
    route: RouteId | None = None
    session: SessionId | None = None


class SessionCreate(_In, frozen=True):
    route: RouteId | None = None
    # The idle lifetime in seconds, renewed by every use; given to an existing session, it replaces its own.
    ttl: Annotated[int, Meta(ge=1, le=MAX_SESSION_TTL)] | None = None


class RouteSwitch(_In, frozen=True):
    route: RouteId | None


class Fork(_In, frozen=True):
    session: SessionId


class Holds(_In, frozen=True):
    refs: list[RefText]


class OriginalImage(msgspec.Struct):
    media_type: str
    bytes: int
    width: int
    height: int


class Normalized(msgspec.Struct):
    """Present when the stored image is not the upload's bytes ([admission] oversize = "fit" or
    strip_metadata = true): the upload as it came, and what was done to it."""

    original: OriginalImage
    steps: list[str]


class Attachment(msgspec.Struct, omit_defaults=True):
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None
    normalized: Normalized | None = None


class Diagnostic(msgspec.Struct):
    index: int
    media_type: str | None
    name: str | None
    code: str | None
    message: str
    hint: str | None


class AdmitAnswer(msgspec.Struct, omit_defaults=True):
    attachments: list[Attachment]
    degraded: bool = False
    diagnostics: list[Diagnostic] = []
    text: str | None = None


class McpResults(_In, frozen=True):
    """POST /v1/mcp/results, the wrapped form: the CallToolResult under `result`, beside route and session
    (which the bare form takes from the query)."""

    result: dict[str, Any]
    route: RouteId | None = None
    session: SessionId | None = None


class McpAnswer(msgspec.Struct, omit_defaults=True):
    """The result with each image a ref block (or, degraded, the text for the model), and the attachments
    of its images in content order."""

    result: dict[str, Any]
    attachments: list[Attachment]
    degraded: bool = False
    diagnostics: list[Diagnostic] = []
    text: str | None = None


class Session(msgspec.Struct):
    session: str
    route: str | None
    holds: list[str]
    created: str  # RFC 3339, UTC
    ttl: int | None  # seconds of idle lifetime; null: kept until deleted
    last_used: str  # RFC 3339, UTC: made, or last renewed
    expires: str | None  # RFC 3339, UTC: last_used + ttl; null: never


class Released(msgspec.Struct):
    session: str
    released: int


class RouteInfo(msgspec.Struct, kw_only=True):
    id: str  # a route id; for a catalog entry its id or its pattern ("claude-*")
    declared_by: Literal["config", "catalog"]
    input_modalities: list[str]
    provider: str | None
    max_request_image_bytes: int | None = None
    max_request_images: int | None = None
    # Per image: larger stored images are sent as derived variants (docs/normalization.md).
    max_request_side: int | None = None
    max_request_pixels: int | None = None
    max_request_bytes: int | None = None
    source: str | None = None  # a catalog entry: where its claim comes from
    replaces: str | None = None  # a configured route: the catalog entry its id would otherwise have


class Routes(msgspec.Struct):
    catalog: str  # the catalog's version
    policy: str  # the fingerprint of the policy applied (docs/configuration.md#one-policy-per-store)
    routes: list[RouteInfo]  # the configured routes by id, then the catalog's entries


class RouteResolution(msgspec.Struct):
    model: str
    accepts_images: bool | None  # null: neither the configuration nor the catalog declares the model
    route: RouteInfo | None  # the declaration that decides, as it applies to this model id
    matched: str | None  # a catalog entry: the form of the model id that matched it


class ErrorBody(msgspec.Struct, omit_defaults=True):
    code: str
    message: str
    index: int | None = None
    hint: str | None = None


class ErrorAnswer(msgspec.Struct):
    error: ErrorBody


encoder = msgspec.json.Encoder()
