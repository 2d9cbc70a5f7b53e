"""The places of admissions in progress (`[admission] max_concurrent`) and the bytes of body they hold
(`max_buffered_bytes`): taken by the edge before it reads a body, so that the memory admissions hold is a
function of the configuration (docs/operations.md#memory)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..config import Config
from ..errors import ServerBusy
from ..metrics import Metrics


class Slots:
    """The `[admission] max_concurrent` places, and the `max_buffered_bytes` of body the admissions in them
    may hold together. An edge takes a place before it reads a body and tells the place the body's size as
    it grows (`Slot.hold`), so that what admission bodies hold in memory is bounded by the configuration
    whatever clients send. One admission alone may always hold a whole body. Past either bound: 503
    SERVER_BUSY, at once; admissions wait outside rather than queue for the decoders, and reads keep
    flowing."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.places = config.admission.max_concurrent
        self.budget = config.admission.buffered_bytes(config.http.body_cap(config.limits))
        self.metrics = metrics
        self.taken = 0
        self.held = 0

    @contextlib.contextmanager
    def take(self, source: str = "") -> Iterator[Slot]:
        """A place for one admission; `source` is what the busy count is labelled with ('' while unknown,
        before the body is read)."""
        if self.taken >= self.places:
            raise self.busy(
                source, f"{self.taken} admissions are in progress, the most this daemon takes at once"
            )
        slot = Slot(self, source)
        self.taken += 1
        try:
            yield slot
        finally:
            self.taken -= 1
            self.held -= slot.held

    def busy(self, source: str, message: str) -> ServerBusy:
        self.metrics.admissions.labels(source, ServerBusy.code).inc()
        return ServerBusy(message, hint="retry after the Retry-After delay")


class Slot:
    __slots__ = ("held", "slots", "source")

    def __init__(self, slots: Slots, source: str) -> None:
        self.slots = slots
        self.source = source
        self.held = 0

    def hold(self, size: int) -> None:
        """The body of this admission is now `size` bytes (it only grows); ServerBusy if the budget, shared
        with the other admissions in progress, cannot take that much."""
        if size <= self.held:
            return
        slots = self.slots
        others = slots.held - self.held
        if others and others + size > slots.budget:
            raise slots.busy(
                self.source,
                f"the other admissions in progress hold {others:,} bytes of request bodies; with this "
                f"one's {size:,} they would pass the {slots.budget:,} this daemon holds at once",
            )
        slots.held = others + size
        self.held = size
