"""The plan alone: each image's fate from the rows and the budgets, with no store and nothing read."""

from __future__ import annotations

from attachstore.config import Route
from attachstore.index import ObjectRow
from attachstore.render import ImageBlock, MessageIn, RenderRequest
from attachstore.render.plan import Fate, Plan, occurrences_of


def ref(n: int) -> str:
    return f"sha256:{n:064x}"


def row(n: int, size: int, state: str = "ok", side: int = 10) -> ObjectRow:
    return ObjectRow(ref(n), "image/png", size, side, side, 1, None, 0.0, 0.0, state)


def request(*refs: str, max_image_bytes: int | None = None, max_images: int | None = None) -> RenderRequest:
    messages = [MessageIn("user", [ImageBlock(r)]) for r in refs]
    return RenderRequest(messages, "openai-chat", max_image_bytes=max_image_bytes, max_images=max_images)


def plan(req: RenderRequest, rows: dict[str, ObjectRow | None], route: Route | None = None) -> Plan:
    return Plan.from_rows(req, route, occurrences_of(req), rows)


def fates(p: Plan) -> list[Fate]:
    return [p.fates[(o.message, o.block)] for o in p.occurrences]


def test_the_newest_images_are_sent_and_from_the_first_that_does_not_fit_every_older_one_is_left_out() -> (
    None
):
    # 300 bytes are 400 of base64: the budget takes two, then the third (counted newest first) does not fit,
    # and the oldest, though it would fit on its own, is left out with it.
    rows: dict[str, ObjectRow | None] = {ref(1): row(1, 3), ref(2): row(2, 300), ref(3): row(3, 300)}
    rows[ref(4)] = row(4, 300)
    p = plan(request(ref(1), ref(2), ref(3), ref(4), max_image_bytes=800), rows)
    assert fates(p) == [Fate.OVER_BUDGET, Fate.OVER_BUDGET, Fate.SENT, Fate.SENT]
    assert p.sent() == {ref(3), ref(4)}
    assert p.read_size([ref(3), ref(4)]) == 600


def test_unknown_and_quarantined_rows_are_unavailable_and_take_no_budget() -> None:
    rows: dict[str, ObjectRow | None] = {ref(1): row(1, 30), ref(2): None, ref(3): row(3, 30, "quarantined")}
    p = plan(request(ref(1), ref(2), ref(3), max_images=1), rows)
    assert fates(p) == [Fate.SENT, Fate.UNAVAILABLE, Fate.UNAVAILABLE]


def test_a_row_marked_missing_is_tried() -> None:
    p = plan(request(ref(1)), {ref(1): row(1, 30, "missing")})
    assert fates(p) == [Fate.SENT]


def test_deciding_again_gives_a_failed_reads_budget_to_older_images() -> None:
    rows: dict[str, ObjectRow | None] = {ref(1): row(1, 300), ref(2): row(2, 300)}
    p = plan(request(ref(1), ref(2), max_images=1), rows)
    assert fates(p) == [Fate.OVER_BUDGET, Fate.SENT]
    p.unavailable.add(ref(2))
    p.decide()
    assert fates(p) == [Fate.SENT, Fate.UNAVAILABLE]


def test_an_image_over_the_routes_limits_needs_a_variant_only_while_it_is_sent() -> None:
    rows: dict[str, ObjectRow | None] = {ref(1): row(1, 30, side=4000), ref(2): row(2, 30, side=4000)}
    route = Route(max_request_side=1000)
    p = plan(request(ref(1), ref(2), max_images=1), rows, route)
    assert p.oversize == {ref(1), ref(2)}
    assert p.to_derive() == [ref(2)]
    p.unfit.add(ref(2))  # no variant within the limits could be made: left out, taking no budget
    p.decide()
    assert fates(p) == [Fate.SENT, Fate.OVER_BUDGET]
    assert p.to_derive() == [ref(1)]
