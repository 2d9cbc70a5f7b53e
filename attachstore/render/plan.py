"""The plan of a render: each image's fate decided from the request, its route and the index rows alone, so
that an image left out is never read (docs/design.md, "Render"). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..config import Route
from ..index import ObjectRow
from ..refs import Ref
from ..service import VariantSpec
from .neutral import ImageBlock, RenderRequest

DEFAULT_BUDGET = 20 * 1024 * 1024  # base64 bytes
_NO_LIMIT = 1 << 62  # a variant limit the route does not set


class Fate(Enum):
    SENT = "sent"
    TEXT_ONLY = "text_only"
    OVER_BUDGET = "over_budget"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Occurrence:
    message: int
    block: int
    image: ImageBlock
    ref: str


def base64_size(n: int) -> int:
    return 4 * ((n + 2) // 3)


def occurrences_of(request: RenderRequest) -> list[Occurrence]:
    return [
        Occurrence(i, j, b, str(Ref.parse(b.ref)))
        for i, m in enumerate(request.messages)
        for j, b in enumerate(m.blocks)
        if isinstance(b, ImageBlock)
    ]


@dataclass(slots=True)
class Plan:
    """Each image's fate, decided from the request and the index alone, and the facts it was decided from.
    Acting on it learns what the index cannot tell (a variant's real size, a read that fails); the plan is
    then decided again from the facts as they now are."""

    occurrences: list[Occurrence]
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
        occurrences: list[Occurrence],
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
        return sorted((self.sent() & self.oversize) - self.variants.keys())

    def read_size(self, refs: list[str]) -> int:
        return sum(
            sent.bytes for ref in refs if (sent := self.variants.get(ref) or self.rows[ref]) is not None
        )

    def media(self) -> dict[str, tuple[str, int, int]]:
        return {
            ref: (sent.media_type, sent.width, sent.height)
            for ref, row in self.rows.items()
            if (sent := self.variants.get(ref, row)) is not None
        }


def variant_spec(route: Route | None, images: int) -> VariantSpec | None:
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
    # Until the variant exists, at most the route's byte limit: a guess the plan corrects once it does.
    if row is None:
        return None
    if variant is not None:
        return variant.bytes
    if oversize and spec is not None:
        return min(row.bytes, spec.max_bytes)
    return row.bytes


def _fates(
    occurrences: list[Occurrence],
    sizes: dict[str, int | None],
    unavailable: set[str],
    unfit: set[str],
    budget: int,
    count: int | None,
) -> dict[tuple[int, int], Fate]:
    """Newest first, each image is sent while it and everything newer fits both budgets; from the first that
    does not fit, everything older is left out (docs/render.md, "Which images are sent"). An image in
    `unfit` is left out on its own, taking no budget."""
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
        b64 = base64_size(size)
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
