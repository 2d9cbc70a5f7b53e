"""Request assembly: the plan's images read, the others placeholders, the turns handed to the provider's
encoder. The rules: docs/render.md, "Which images are sent"; an image that cannot be read becomes a
placeholder and never fails the request."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from ..config import Placeholders, Provider, Route
from ..errors import AttachstoreError, InvalidRequest, Rejected, ServerBusy
from ..index import ObjectRow
from ..refs import Ref
from ..service import Store, VariantSpec, accepts_images
from . import tokens
from .model import Image, Part, Text, ToolCall, Turn
from .neutral import ImageBlock, RenderRequest, TextBlock, check
from .plan import Fate, Occurrence, Plan, base64_size, occurrences_of
from .providers import Embed, as_text, render_body

PROVIDERS = get_args(Provider)


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


async def render(
    store: Store,
    request: RenderRequest,
    *,
    tenant: str = "",
    embed: Embed = as_text,
    claim: Callable[[int], None] | None = None,
) -> Rendered:
    """Refs to a provider-ready request body; importable by hosts that embed the store (docs/render.md,
    "Embedding it in Python"). `embed` makes the value that stands for an image's base64: the default, in a
    thread; any other, on the event loop (it marks where the base64 goes). What `claim` raises for the bytes
    about to be read ends the render."""
    check(request)
    route_name, route = await _route(store, request, tenant)
    provider = _provider(request, route, route_name)
    placeholders = route.placeholders if route else Placeholders()
    vision = request.vision if request.vision is not None else accepts_images(store.routes, route_name)
    occurrences = occurrences_of(request)
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
    route_name = request.route
    if request.session is not None:
        session = await store.sessions.named((tenant, request.session))
        route_name = route_name if route_name is not None else session.route
    return route_name, store.routes.route(route_name)


async def _plan(
    store: Store,
    request: RenderRequest,
    route: Route | None,
    occurrences: list[Occurrence],
    scope: str | None,
) -> Plan:
    unique = list(dict.fromkeys(o.ref for o in occurrences))
    found = await store.rows(unique, scope) if unique else {}
    return Plan.from_rows(request, route, occurrences, {ref: found.get(ref) for ref in unique})


async def _act(
    store: Store, plan: Plan, scope: str | None, tenant: str, claim: Callable[[int], None] | None
) -> dict[str, bytes | bytearray]:
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


async def _variants(
    store: Store, rows: list[ObjectRow | None], spec: VariantSpec, tenant: str
) -> list[ObjectRow | Fate]:
    # At most the tenant's cap of derivations at a time, so that a render alone never meets the cap.
    room = asyncio.Semaphore(store.config.admission.max_derivations_per_tenant)

    async def one(row: ObjectRow | None) -> ObjectRow | Fate:
        async with room:
            return await _variant(store, row, spec, tenant)

    return await asyncio.gather(*(one(row) for row in rows))


async def _variant(store: Store, row: ObjectRow | None, spec: VariantSpec, tenant: str) -> ObjectRow | Fate:
    """The variant, or why there is none (OVER_BUDGET: left out as too large, not reported as damaged).
    ServerBusy is raised: the image is fine, the request is to be tried again."""
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


async def _read(
    store: Store,
    wanted: dict[str, ObjectRow],
    variants: dict[str, ObjectRow],
    spec: VariantSpec | None,
    scope: str | None,
    tenant: str,
) -> dict[str, bytes | bytearray]:
    # One bad object is left out; one collected since its row was looked up is unavailable like one
    # that had no row.
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
    # One that fails its read is derived again (Store.read_variant), which heals it.
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
                b64 += base64_size(len(data[ref]))
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
    # Made once per image and prefix: every occurrence of a ref shares the value, so an image named many
    # times costs its encoding once.
    made: dict[tuple[str, int], Any] = {}

    def once(prefix: str, image: Image) -> Any:
        key = (prefix, id(image.data))  # the data of one ref is one object, alive for the whole render
        if key not in made:
            made[key] = embed(prefix, image)
        return made[key]

    return once


def _say(without_path: str, with_path: str, block: ImageBlock) -> str:
    return with_path.replace("{path}", block.path) if block.path else without_path
