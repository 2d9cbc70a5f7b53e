"""Request variants (docs/normalization.md): an image over a route's per-request limits is sent as a variant,
derived once, stored content-addressed and linked to its source so that gc collects it with its source."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from ..config import Config
from ..errors import AttachstoreError, Corrupt, Missing, NotFound, Rejected, ServerBusy, StorageUnavailable
from ..gate import DecodePool
from ..index import Index, Link, ObjectRow
from ..metrics import Metrics
from ..refs import Checker, Ref
from ..storage import Put
from .model import ImageRef
from .publish import Check, Publisher

log = logging.getLogger(__name__)

# A variant that could not be made is not tried again for this long (renders of a conversation repeat):
# a failure costs up to decode_timeout of a decode worker. At most _UNFIT_KEPT are remembered.
_UNFIT_SECONDS = 600.0
_UNFIT_KEPT = 10_000

Verified = Callable[[Ref, ObjectRow, str | None], Awaitable[tuple[ImageRef, bytes]]]


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """A `preview` is a still image within them: an animation exceeds it too."""

    max_side: int
    max_pixels: int
    max_bytes: int
    preview: bool = False

    @property
    def key(self) -> str:
        # Names the derivation: the same source and key always give the same bytes (normalize.fit).
        if self.preview:
            return f"preview/1 side={self.max_side} bytes={self.max_bytes}"
        return f"fit/1 side={self.max_side} pixels={self.max_pixels} bytes={self.max_bytes}"

    def exceeded_by(self, row: ObjectRow) -> bool:
        return (
            max(row.width, row.height) > self.max_side
            or row.width * row.height > self.max_pixels
            or row.bytes > self.max_bytes
            or (self.preview and row.frames > 1)
        )


class Variants:
    def __init__(
        self,
        config: Config,
        index: Index,
        pool: DecodePool,
        verified: Verified,
        publisher: Publisher,
        metrics: Metrics,
        checker: Checker,
    ) -> None:
        self.config = config
        self.checker = checker
        self.index = index
        self.pool = pool
        self.verified = verified
        self.publisher = publisher
        self.metrics = metrics
        # Derivations in progress by (source, spec, tenant): concurrent callers of one tenant share one, and
        # each tenant's run in its own turn of the decode pool, so that none waits behind another's queue.
        self._deriving: dict[tuple[str, str, str], asyncio.Future[ObjectRow]] = {}
        self.per_tenant = config.admission.max_derivations_per_tenant
        # (source, spec) whose derivation failed in the decode pool, until when, and why.
        self._unfit: dict[tuple[str, str], tuple[float, Rejected]] = {}

    async def close(self) -> None:
        for task in list(self._deriving.values()):
            task.cancel()
        await asyncio.gather(*self._deriving.values(), return_exceptions=True)

    async def variant(
        self, source: ObjectRow, spec: VariantSpec, tenant: str | None = "", *, again: bool = False
    ) -> ObjectRow:
        """Concurrent callers of one tenant share one derivation. `again` derives over a recorded variant
        whose bytes failed a read (the same bytes, which heals them)."""
        key = (source.ref, spec.key)
        if not again:
            found = self.followed(await self.index.variant(*key), count=True)
            if found is not None and found.state == "ok":
                self.metrics.variants.labels("cached").inc()
                return found
        failed = self._unfit.get(key)
        if failed is not None and failed[0] > time.monotonic():
            why = failed[1]  # it failed a moment ago: the same work would fail the same way
            raise Rejected(why.code, why.message, hint=why.hint)
        whose = tenant or ""
        running = (*key, whose)
        task = self._deriving.get(running)
        if task is None:
            pending = sum(1 for k in self._deriving if k[2] == whose)  # at most tenants x the cap
            if pending >= self.per_tenant:
                self.metrics.variants.labels("busy").inc()
                raise ServerBusy(
                    f"{pending} derivations of this tenant (previews, request variants) are in "
                    "progress or waiting for a decode worker, the most one tenant may have at once",
                    hint="retry after the Retry-After delay",
                )
            task = asyncio.ensure_future(self._derive(source, spec, whose))
            self._deriving[running] = task
            task.add_done_callback(lambda t: self._derived(running, t))
        try:
            return await asyncio.shield(task)
        except Rejected as e:  # no variant fits, or past the time bound: remembered for a while
            self._unfit[key] = (time.monotonic() + _UNFIT_SECONDS, e)
            if len(self._unfit) > _UNFIT_KEPT:
                now = time.monotonic()
                self._unfit = {k: v for k, v in self._unfit.items() if v[0] > now}
            raise

    def followed(self, link: Link | None, *, count: bool = False) -> ObjectRow | None:
        """A link whose keyed check is missing or does not hold (forged in the index: pointed at another
        object, which would verify as itself) is not followed; it is derived again, which records a checked
        one."""
        if link is None:
            return None
        if self.checker.link_holds(link.check, link.source, link.spec, link.row.ref):
            return link.row
        if count:
            # None, or another key's (a store copied from one with another key): unchecked, not forged.
            why = "mismatch" if self.checker.mine(link.check) else "unchecked"
            self.metrics.links_refused.labels(why).inc()
            if why == "unchecked":
                log.info(
                    "the variant link of %s (%s) has no keyed check of this key (older than link checks, or "
                    "copied from a store with another key): derived again",
                    link.source,
                    link.spec,
                )
            else:
                log.warning(
                    "the variant link of %s (%s) to %s does not fit its keyed check (damaged or forged in "
                    "the index): not followed, the variant is derived again",
                    link.source,
                    link.spec,
                    link.row.ref,
                )
        return None

    def _derived(self, running: tuple[str, str, str], task: asyncio.Future[ObjectRow]) -> None:
        self._deriving.pop(running, None)
        if not task.cancelled():
            task.exception()  # retrieved: a failure is its callers' to raise, not the loop's to log

    async def read(
        self, source: ObjectRow, variant: ObjectRow, spec: VariantSpec, tenant: str | None = ""
    ) -> tuple[ImageRef, bytes]:
        try:
            return await self.verified(Ref.parse(variant.ref), variant, None)
        except (Corrupt, Missing, NotFound):
            again = await self.variant(source, spec, tenant, again=True)
            return await self.verified(Ref.parse(again.ref), again, None)

    async def _derive(self, source: ObjectRow, spec: VariantSpec, tenant: str) -> ObjectRow:
        async def read_source() -> bytes:
            # Once a decode worker is there for the job, not while it waits: a queued derivation holds no
            # bytes. Unscoped: the caller has looked the source's row up under its own scope.
            _, data = await self.verified(Ref.parse(source.ref), source, None)
            return data

        limits = self.config.limits
        target = msgspec.structs.replace(
            limits, max_side=spec.max_side, max_pixels=spec.max_pixels, max_image_bytes=spec.max_bytes
        )
        source_limits = self.config.admission.fit_limits(limits)
        passed = await self.pool.derive(
            read_source,
            source.media_type,
            (spec.max_side, spec.max_pixels, spec.max_bytes),
            target,
            source_limits,
            self.config.hash,
            preview=spec.preview,
            check_key=self.checker.key,
            tenant=tenant,
        )
        if passed.data is None:  # pragma: no cover - a derivation always answers with its bytes
            raise AttachstoreError("the decode worker answered a derivation without bytes")
        ref, derived = Ref(self.config.hash, passed.digest), passed.data

        async def publish(
            existing: dict[str, ObjectRow], now: float, puts: list[Put], check: Check
        ) -> ObjectRow:
            row = ObjectRow(
                str(ref),
                passed.media_type,
                len(derived),
                passed.width,
                passed.height,
                passed.frames,
                None,
                existing[str(ref)].created_at if str(ref) in existing else now,
                now,
                keyed_check=passed.check,
            )
            link = self.checker.link(source.ref, spec.key, row.ref)
            if not await self.index.publish_variant(row, source.ref, spec.key, check, link):
                raise NotFound(f"no attachment {source.ref}: it was collected while its variant was made")
            return row

        row = await self.publisher.store(
            [(ref, derived)],
            publish,
            # collected (as another source's variant, say) between its write and its link, every time
            lambda: StorageUnavailable(f"the variant {ref} kept disappearing while it was being published"),
        )
        self.metrics.variants.labels("derived").inc()
        return row
