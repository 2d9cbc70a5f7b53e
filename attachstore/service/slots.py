"""The places of admissions in progress and the bytes of request body held at once, taken by the edge before
it reads a body, so that memory is bounded by the configuration (docs/operations.md#memory) and one tenant
cannot take it all."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from ..config import Config
from ..errors import ServerBusy
from ..metrics import Metrics


class Slots:
    """A request with nothing else of its tenant's in progress may always hold a whole body. Past a bound:
    SERVER_BUSY at once; admissions wait outside rather than queue for the decoders."""

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
        """The body only grows; ServerBusy past the budget or the tenant's share of it."""
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
