"""The places of admissions in progress (`[admission] max_concurrent`) and the bytes of request body held
at once (`max_buffered_bytes`): taken by the edge before it reads a body, so that the memory request bodies
hold is a function of the configuration (docs/operations.md#memory), and shared out so that one tenant
cannot take them all from the others."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from ..config import Config
from ..errors import ServerBusy
from ..metrics import Metrics


class Slots:
    """The `[admission] max_concurrent` places, and the `max_buffered_bytes` of body that requests in
    progress may hold together: admissions in their places, and the bodies of other requests (renders,
    session changes), which take bytes but no place. An edge takes a place (or a body's share) before it
    reads a body and tells it the body's size as it grows (`Slot.hold`), so that what bodies hold in memory
    is bounded by the configuration whatever clients send. One tenant holds at most
    `max_concurrent_per_tenant` of the places and the same share of the bytes, so the rest stay for the
    others. A request with nothing else of its tenant's in progress may always hold a whole body. Past a
    bound: 503 SERVER_BUSY, at once; admissions wait outside rather than queue for the decoders, and reads
    keep flowing."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        admission = config.admission
        self.places = admission.max_concurrent
        self.budget = admission.buffered_bytes(config.http.body_cap(config.limits))
        self.tenant_places = admission.tenant_places(len({t.name for t in config.tenants}))
        self.tenant_budget = self.budget * self.tenant_places // self.places
        self.metrics = metrics
        self.taken = 0
        self.held = 0
        self._taken: Counter[str] = Counter()  # places, by tenant
        self._held: Counter[str] = Counter()  # bytes, by tenant

    @contextlib.contextmanager
    def take(self, tenant: str = "", source: str = "") -> Iterator[Slot]:
        """A place for one admission of `tenant`; `source` is what the busy count is labelled with ('' while
        unknown, before the body is read)."""
        if self.taken >= self.places:
            raise self.busy(
                source, f"{self.taken} admissions are in progress, the most this daemon takes at once"
            )
        if self._taken[tenant] >= self.tenant_places:
            raise self.busy(
                source,
                f"{self._taken[tenant]} admissions of this tenant are in progress, the most one tenant may "
                "have at once",
            )
        self.taken += 1
        self._taken[tenant] += 1
        try:
            with self.body(tenant, source) as slot:
                yield slot
        finally:
            self.taken -= 1
            self._taken[tenant] -= 1

    @contextlib.contextmanager
    def body(self, tenant: str = "", source: str = "") -> Iterator[Slot]:
        """A share of the byte budget for the body of one request of `tenant`, without a place."""
        slot = Slot(self, tenant, source)
        try:
            yield slot
        finally:
            self.held -= slot.held
            self._held[tenant] -= slot.held

    def busy(self, source: str, message: str) -> ServerBusy:
        self.metrics.admissions.labels(source, ServerBusy.code).inc()
        return ServerBusy(message, hint="retry after the Retry-After delay")


class Slot:
    __slots__ = ("held", "slots", "source", "tenant")

    def __init__(self, slots: Slots, tenant: str, source: str) -> None:
        self.slots = slots
        self.tenant = tenant
        self.source = source
        self.held = 0

    def hold(self, size: int) -> None:
        """The body of this request is now `size` bytes (it only grows); ServerBusy if the budget, shared
        with the other requests in progress, or this tenant's share of it cannot take that much."""
        if size <= self.held:
            return
        slots, grow = self.slots, size - self.held
        others = slots.held - self.held
        mine = slots._held[self.tenant] - self.held  # this tenant's other requests
        if others and others + size > slots.budget:
            raise slots.busy(
                self.source,
                f"the other requests in progress hold {others:,} bytes of request bodies; with this "
                f"one's {size:,} they would pass the {slots.budget:,} this daemon holds at once",
            )
        if mine and mine + size > slots.tenant_budget:
            raise slots.busy(
                self.source,
                f"this tenant's other requests in progress hold {mine:,} bytes of request bodies; with this "
                f"one's {size:,} they would pass the {slots.tenant_budget:,} one tenant may hold at once",
            )
        slots.held += grow
        slots._held[self.tenant] += grow
        self.held = size
