"""Request assembly: decide for every image whether it is sent, left out, or unavailable; read the ones
that are sent; hand provider-neutral turns to the provider's encoder.

Rules (SPEC section 10): a text-only route gets one placeholder per message that had images and no image
is read; otherwise the newest images are kept while they fit the budget (base64 bytes and count) and the
older ones become placeholders, decided from the index alone, so dropped images are never read; an image
whose object is missing or damaged becomes a placeholder and never fails the request.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, get_args

from ..config import Placeholders, Provider, Route
from ..errors import AttachstoreError, InvalidRequest, Rejected, ServerBusy
from ..index import ObjectRow
from ..refs import Ref
from ..service import Store, VariantSpec, accepts_images
from . import tokens
from .model import Image, Part, Text, ToolCall, Turn
from .neutral import ImageBlock, RenderRequest, TextBlock, check
from .providers import Embed, as_text, render_body

DEFAULT_BUDGET = 20 * 1024 * 1024  # base64 bytes
_NO_LIMIT = 1 << 62  # a variant limit the route does not set
PROVIDERS = get_args(Provider)


class Fate(Enum):
    SENT = "sent"
    TEXT_ONLY = "text_only"
    OVER_BUDGET = "over_budget"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Summary:
    included: int
    omitted: int
    unavailable: int
    base64_bytes: int
    estimated_image_tokens: int
    resized: int = 0  # images sent as a route-sized variant (docs/normalization.md)


@dataclass(frozen=True, slots=True)
class Rendered:
    provider: str
    body: dict[str, Any]
    summary: Summary


@dataclass(frozen=True, slots=True)
class _Occurrence:
    message: int
    block: int
    image: ImageBlock
    ref: str


def _base64_size(n: int) -> int:
    return 4 * ((n + 2) // 3)


async def render(
    store: Store,
    request: RenderRequest,
    *,
    tenant: str = "",
    embed: Embed = as_text,
    claim: Callable[[int], None] | None = None,
) -> Rendered:
    """Refs to a provider-ready request body. Importable by hosts that embed the store.

    `embed` makes the value that stands for an image's base64 in the body (providers.py); the default gives
    plain strings, and is called in a thread. Any other is called on the event loop: it marks where the
    base64 goes, and leaves the encoding to whoever writes the body (as the daemon's answer does). `claim`,
    if given, is called with the bytes of the images about to be read, before they are read; what it raises
    ends the render (the daemon counts them against the answers' memory budget)."""
    check(request)
    route_name, route = await _route(store, request, tenant)
    provider = _provider(request, route, route_name)
    placeholders = route.placeholders if route else Placeholders()
    vision = request.vision if request.vision is not None else accepts_images(store.routes, route_name)
    occurrences = _occurrences(request)
    if vision is False:  # nothing is looked up, nothing is read
        text_only = {(o.message, o.block): Fate.TEXT_ONLY for o in occurrences}
        return _finish(request, provider, placeholders, embed, text_only, {}, {})

    scope = store.scope(tenant)  # an image the caller may not see is unavailable, like a missing one
    plan = await _plan(store, request, route, occurrences, scope)
    data = await _act(store, plan, scope, tenant, claim)
    finish = functools.partial(
        _finish,
        request,
        provider,
        placeholders,
        embed,
        plan.fates,
        data,
        plan.media(),
        resized=len(plan.variants.keys() & data.keys()),
    )
    # The default `embed` encodes every image into the body's strings: off the event loop. Any other costs
    # less than a trip to a thread (docs/performance.md).
    return await asyncio.to_thread(finish) if embed is as_text else finish()


async def _route(store: Store, request: RenderRequest, tenant: str) -> tuple[str | None, Route | None]:
    """The request's route, else its session's."""
    route_name = request.route
    if request.session is not None:
        session = await store.sessions.get((tenant, request.session))
        route_name = route_name if route_name is not None else session.route
    return route_name, store.routes.route(route_name)


def _occurrences(request: RenderRequest) -> list[_Occurrence]:
    return [
        _Occurrence(i, j, b, str(Ref.parse(b.ref)))
        for i, m in enumerate(request.messages)
        for j, b in enumerate(m.blocks)
        if isinstance(b, ImageBlock)
    ]


@dataclass(slots=True)
class Plan:
    """Each image's fate, decided from the request and the index alone, and the facts it was decided from.
    Acting on it learns what the index cannot tell (a variant's real size, a read that fails); the plan is
    then decided again from the facts as they now are."""

    occurrences: list[_Occurrence]
    rows: dict[str, ObjectRow | None]
    spec: VariantSpec | None  # the route's per-image limits, if it has any
    oversize: set[str]  # over those limits: sent as a variant
    budget: int  # base64 bytes
    count: int | None  # images
    unavailable: set[str]  # no row, not visible, quarantined, or failed to read
    unfit: set[str] = field(default_factory=set)  # stored intact, but no variant within the limits
    variants: dict[str, ObjectRow] = field(default_factory=dict)  # source ref -> the variant sent instead
    fates: dict[tuple[int, int], Fate] = field(default_factory=dict)

    @classmethod
    def from_rows(
        cls,
        request: RenderRequest,
        route: Route | None,
        occurrences: list[_Occurrence],
        rows: dict[str, ObjectRow | None],
    ) -> Plan:
        # Known unavailable without a read: no row (or not visible), or quarantined. A row marked missing is
        # tried, since its file may be back.
        unavailable = {ref for ref, row in rows.items() if row is None or row.state == "quarantined"}
        spec = variant_spec(route, sum(1 for o in occurrences if o.ref not in unavailable))
        oversize = {
            ref for ref, row in rows.items() if row is not None and spec is not None and spec.exceeded_by(row)
        }
        plan = cls(occurrences, rows, spec, oversize, *_budget(request, route), unavailable)
        plan.decide()
        return plan

    def decide(self) -> None:
        sizes = {
            ref: _size(row, self.variants.get(ref), ref in self.oversize, self.spec)
            for ref, row in self.rows.items()
        }
        self.fates = _fates(self.occurrences, sizes, self.unavailable, self.unfit, self.budget, self.count)

    def sent(self) -> set[str]:
        return {o.ref for o in self.occurrences if self.fates[(o.message, o.block)] is Fate.SENT}

    def to_derive(self) -> list[str]:
        """The images sent that need a variant not made yet."""
        return sorted((self.sent() & self.oversize) - self.variants.keys())

    def read_size(self, refs: list[str]) -> int:
        """The bytes that reading `refs` brings into memory: each one's variant, else its stored object."""
        return sum(_stored_size(self.rows[ref], self.variants.get(ref)) for ref in refs)

    def media(self) -> dict[str, tuple[str, int, int]]:
        """Media type, width and height of what is sent for each ref: its variant, else the stored object."""
        return {
            ref: (sent.media_type, sent.width, sent.height)
            for ref, row in self.rows.items()
            if (sent := self.variants.get(ref, row)) is not None
        }


async def _plan(
    store: Store,
    request: RenderRequest,
    route: Route | None,
    occurrences: list[_Occurrence],
    scope: str | None,
) -> Plan:
    unique = list(dict.fromkeys(o.ref for o in occurrences))
    found = await store.index.get_many(unique, scope) if unique else {}
    return Plan.from_rows(request, route, occurrences, {ref: found.get(ref) for ref in unique})


async def _act(
    store: Store, plan: Plan, scope: str | None, tenant: str, claim: Callable[[int], None] | None
) -> dict[str, bytes | bytearray]:
    """The verified bytes of the images `plan` sends, deciding it again whenever what is learnt changes it:
    variants are derived only for images it sends, and their real sizes may change it; an image that fails
    its read gives its share of the budget back to older ones."""
    data: dict[str, bytes | bytearray] = {}
    while True:
        if plan.spec is not None and (derive := plan.to_derive()):
            made = await _variants(store, [plan.rows[ref] for ref in derive], plan.spec, tenant)
            for ref, v in zip(derive, made, strict=True):
                if isinstance(v, ObjectRow):
                    plan.variants[ref] = v
                else:
                    (plan.unfit if v is Fate.OVER_BUDGET else plan.unavailable).add(ref)
            plan.decide()
            continue
        wanted = sorted(plan.sent() - data.keys())
        if claim is not None and wanted:
            claim(plan.read_size(wanted))
        read = await _read(
            store,
            {ref: row for ref in wanted if (row := plan.rows[ref]) is not None},
            plan.variants,
            plan.spec,
            scope,
            tenant,
        )
        failed = set(wanted) - read.keys()
        data |= read
        if not failed:
            return data
        plan.unavailable |= failed
        plan.decide()


def variant_spec(route: Route | None, images: int) -> VariantSpec | None:
    """The per-image limits of a request on `route` carrying `images` images, or None if it has none."""
    if route is None:
        return None
    side = route.max_request_side
    many = route.many_images
    if many is not None and images > many.more_than:
        side = min(side or many.max_side, many.max_side)
    if side is None and route.max_request_pixels is None and route.max_request_bytes is None:
        return None
    return VariantSpec(
        side or _NO_LIMIT, route.max_request_pixels or _NO_LIMIT, route.max_request_bytes or _NO_LIMIT
    )


def _size(
    row: ObjectRow | None, variant: ObjectRow | None, oversize: bool, spec: VariantSpec | None
) -> int | None:
    """The bytes an image will take in the request: its variant's once known; until then, at most the
    route's byte limit (a guess the plan corrects once the variant exists)."""
    if row is None:
        return None
    if variant is not None:
        return variant.bytes
    if oversize and spec is not None:
        return min(row.bytes, spec.max_bytes)
    return row.bytes


def _stored_size(row: ObjectRow | None, variant: ObjectRow | None) -> int:
    """The bytes a read of an image the plan sends brings into memory."""
    sent = variant or row
    return sent.bytes if sent is not None else 0


async def _variants(
    store: Store, rows: list[ObjectRow | None], spec: VariantSpec, tenant: str
) -> list[ObjectRow | Fate]:
    """The variants of `rows` (each as _variant), derived in `tenant`'s turn, at most the tenant's cap of
    derivations at a time, so that a render alone never meets the cap. Raises ServerBusy when the tenant's
    other requests hold the cap."""
    room = asyncio.Semaphore(store.variants.per_tenant)

    async def one(row: ObjectRow | None) -> ObjectRow | Fate:
        async with room:
            return await _variant(store, row, spec, tenant)

    return await asyncio.gather(*(one(row) for row in rows))


async def _variant(store: Store, row: ObjectRow | None, spec: VariantSpec, tenant: str) -> ObjectRow | Fate:
    """The variant, or why there is none: the source cannot be read (UNAVAILABLE), or its bytes are fine
    but no variant within the route's limits could be made (OVER_BUDGET: the image is left out as too
    large, with the budget's placeholder, not reported as damaged). ServerBusy is raised: the image is fine,
    the request is to be tried again."""
    if row is None:  # pragma: no cover - only rows found are oversize
        return Fate.UNAVAILABLE
    try:
        return await store.variant(row, spec, tenant)
    except ServerBusy:
        raise
    except Rejected:  # from the decode pool: no fit, or past the time bound
        return Fate.OVER_BUDGET
    except AttachstoreError:
        return Fate.UNAVAILABLE


def _fates(
    occurrences: list[_Occurrence],
    sizes: dict[str, int | None],
    unavailable: set[str],
    unfit: set[str],
    budget: int,
    count: int | None,
) -> dict[tuple[int, int], Fate]:
    """Newest first, each image is sent while it and everything newer fits both budgets; from the first
    that does not fit, everything older is left out. Sizes (bytes; None: no row) come from the index:
    nothing is read to decide. An image in `unfit` is left out on its own, taking no budget."""
    fates: dict[tuple[int, int], Fate] = {}
    used = sent = 0
    full = False
    for o in reversed(occurrences):
        size = sizes[o.ref]
        if size is None or o.ref in unavailable:
            fates[(o.message, o.block)] = Fate.UNAVAILABLE
            continue
        if o.ref in unfit:
            fates[(o.message, o.block)] = Fate.OVER_BUDGET
            continue
        b64 = _base64_size(size)
        full = full or used + b64 > budget or (count is not None and sent + 1 > count)
        if full:
            fates[(o.message, o.block)] = Fate.OVER_BUDGET
            continue
        fates[(o.message, o.block)] = Fate.SENT
        used += b64
        sent += 1
    return fates


def _budget(request: RenderRequest, route: Route | None) -> tuple[int, int | None]:
    """Base64 bytes: the route's, else 20 MiB, or less if the request asks for less; a request never raises
    it, since it is what bounds the answer. Image count: the request's, else the route's, else no limit."""
    most = (route.max_request_image_bytes if route else None) or DEFAULT_BUDGET
    budget = min(request.max_image_bytes or most, most)
    count = request.max_images
    if count is None and route is not None:
        count = route.max_request_images
    return budget, count


async def _read(
    store: Store,
    wanted: dict[str, ObjectRow],
    variants: dict[str, ObjectRow],
    spec: VariantSpec | None,
    scope: str | None,
    tenant: str,
) -> dict[str, bytes | bytearray]:
    """The verified bytes of those of `wanted` that could be read: one bad object never fails the request, it
    is left out. The rows were looked up under `scope` (their visibility checked) with all the others, in one
    statement; an object collected since is unavailable like one that had no row. The stored objects are read
    together (Reads.verified_many), the variants each on their own."""
    resized = [ref for ref in wanted if ref in variants]  # a variant exists only under a spec
    stored = [ref for ref in wanted if ref not in variants]
    reads = (
        []
        if spec is None
        else [_variant_bytes(store, wanted[ref], variants[ref], spec, tenant) for ref in resized]
    )
    as_stored, as_resized = await asyncio.gather(
        store.verified_many([(Ref.parse(ref), wanted[ref]) for ref in stored], scope),
        asyncio.gather(*reads),
    )
    read = zip([*stored, *resized], [*as_stored, *as_resized], strict=True)
    return {ref: data for ref, data in read if data is not None}


async def _variant_bytes(
    store: Store, row: ObjectRow, variant: ObjectRow, spec: VariantSpec, tenant: str
) -> bytes | None:
    """A variant's verified bytes, or None. A variant (which no tenant holds a grant to) whose bytes fail
    their read, or that was collected since, is derived again in `tenant`'s turn (the same bytes, which
    heals it) and read once more; ServerBusy is raised, as by _variant."""
    try:
        _, data = await store.read_variant(row, variant, spec, tenant)
    except ServerBusy:
        raise
    except AttachstoreError:
        return None
    return data


def _provider(request: RenderRequest, route: Route | None, route_name: str | None) -> Provider:
    if request.provider is not None:
        if request.provider not in PROVIDERS:  # possible for a struct built in Python, not decoded
            raise InvalidRequest(f"invalid request at $.provider: unknown provider {request.provider!r}")
        return request.provider
    if route is not None and route.provider is not None:
        return route.provider
    raise InvalidRequest(
        "invalid request at $.provider: name a provider (openai-chat, openai-responses, anthropic, gemini)"
        + (f"; route {route_name!r} has no default provider" if route_name else ""),
    )


def _finish(
    request: RenderRequest,
    provider: Provider,
    placeholders: Placeholders,
    embed: Embed,
    fates: dict[tuple[int, int], Fate],
    data: dict[str, bytes | bytearray],
    media: dict[str, tuple[str, int, int]],
    *,
    resized: int = 0,
) -> Rendered:
    embed = _once(embed)
    turns: list[Turn] = []
    included = omitted = unavailable = b64 = estimated = 0
    for i, m in enumerate(request.messages):
        parts: list[Part] = []
        text_only_said = False
        for j, b in enumerate(m.blocks):
            if isinstance(b, TextBlock):
                parts.append(Text(b.text))
                continue
            fate = fates[(i, j)]
            if fate is Fate.SENT:
                ref = str(Ref.parse(b.ref))
                media_type, width, height = media[ref]
                parts.append(Image(media_type, data[ref], b.detail))
                included += 1
                b64 += _base64_size(len(data[ref]))
                estimated += tokens.estimate(provider, width, height, b.detail)
            elif fate is Fate.TEXT_ONLY:
                omitted += 1
                if not text_only_said:  # one placeholder per message, not per image
                    parts.append(Text(placeholders.text_only, placeholder=True))
                    text_only_said = True
            elif fate is Fate.OVER_BUDGET:
                omitted += 1
                parts.append(Text(_say(placeholders.over_budget, placeholders.over_budget_path, b), True))
            else:
                unavailable += 1
                parts.append(Text(_say(placeholders.unavailable, placeholders.unavailable_path, b), True))
        calls = [ToolCall(c.id, c.name, c.arguments) for c in m.tool_calls or []]
        turns.append(Turn(m.role, parts, calls, m.tool_call_id, m.name))
    summary = Summary(included, omitted, unavailable, b64, estimated, resized)
    return Rendered(provider, render_body(provider, turns, embed), summary)


def _once(embed: Embed) -> Embed:
    """`embed` made once per image and prefix: every occurrence of a ref shares the value (one base64 string,
    or one slot), so an image named many times costs its encoding once."""
    made: dict[tuple[str, int], Any] = {}

    def once(prefix: str, image: Image) -> Any:
        key = (prefix, id(image.data))  # the data of one ref is one object, alive for the whole render
        if key not in made:
            made[key] = embed(prefix, image)
        return made[key]

    return once


def _say(without_path: str, with_path: str, block: ImageBlock) -> str:
    return with_path.replace("{path}", block.path) if block.path else without_path
