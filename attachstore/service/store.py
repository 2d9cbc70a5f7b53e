"""`Store` opens the backends and composes the service's parts, each in a module of its own: admissions,
verified reads, request variants and sessions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal, overload

import msgspec

from ..config import Config
from ..errors import ConfigError, Rejected
from ..gate import DecodePool
from ..index import Index, ObjectRow, SqliteIndex
from ..metrics import Metrics
from ..refs import Checker, Ref
from ..storage import BlobStore, FileOps, LocalBackend, LocalBlobStore, Mapped, ReadCache
from ..storage.mapped import BREAK_SIGNAL, watch
from . import checkkey
from .admission import Admission, Admissions
from .catalog import Catalog, builtin
from .listings import Listings
from .model import ImageRef, Upload
from .policy import RouteTable
from .previews import Previews
from .publish import Publisher
from .reads import Reads
from .sessions import Sessions
from .slots import Slot
from .stats import Figures
from .storepolicy import Applied, Role, take_policy
from .validation import Validator
from .variants import Variants, VariantSpec


class Store:
    """What the edges call is a method here. gc, the audit and migrate use `index`, `blobs` and `local`
    directly, under the same locks (docs/design.md, "The map")."""

    def __init__(
        self,
        config: Config,
        blobs: BlobStore,
        index: Index,
        pool: DecodePool,
        catalog: Catalog | None = None,
        checker: Checker | None = None,
    ) -> None:
        self.config = config
        # The keyed check recorded at admission and verified by reads (docs/security.md).
        self.checker = checker or checkkey.checker(config)
        self.blobs = blobs  # for maintenance, which works on the blob store directly
        # The file-system store behind the local backend, for what only it has (staging files, the audit's
        # direct walk); None on S3.
        self.local = blobs.blobs if isinstance(blobs, LocalBackend) else None
        self.index = index  # for maintenance, which works on the index directly
        self.pool = pool
        self.metrics = pool.metrics  # the decode pool counts its jobs in the store's registry
        # The model declarations every check reads: the configured routes over the catalog.
        self.routes = RouteTable(config.routes, catalog or builtin())
        self.policy: Applied | None = None  # set by open(): the policy applied, and the daemon's node
        self.sessions = Sessions(config, index, self.routes)  # sessions and their holds, for the edges too
        self.reads = Reads(config, blobs, index, self.local, self.metrics, self.checker)
        self.resident = self.reads.resident
        self.publisher = Publisher(blobs, index)
        self.admissions = Admissions(
            config, index, pool, self.sessions, self.publisher, self.metrics, self.checker
        )
        self.variants = Variants(
            config, index, pool, self.reads.verified, self.publisher, self.metrics, self.checker
        )
        self.previews = Previews(self.reads, self.variants)
        self.listings = Listings(config, index)  # pages of sessions and of their holds
        self.figures = Figures(config, index)  # GET /v1/stats

    # -- admissions ------------------------------------------------------------------------------------------

    async def admit(
        self,
        uploads: Sequence[Upload],
        source: str | None,
        *,
        route: str | None = None,
        session: str | None = None,
        tenant: str = "",
        slot: Slot | None = None,
        exact: bool = False,
    ) -> Admission:
        return await self.admissions.admit(
            uploads, source, route=route, session=session, tenant=tenant, slot=slot, exact=exact
        )

    async def check(
        self,
        uploads: Sequence[Upload],
        source: str,
        *,
        route: str | None = None,
        tenant: str = "",
        exact: bool = False,
    ) -> list[Rejected | None]:
        return await self.admissions.check(uploads, source, route=route, tenant=tenant, exact=exact)

    def admission_slot(self, tenant: str = "", source: str = "") -> AbstractContextManager[Slot]:
        return self.admissions.slots.take(tenant, source)

    def body_slot(self, tenant: str = "", source: str = "") -> AbstractContextManager[Slot]:
        return self.admissions.slots.body(tenant, source)

    def validator(self, config: Config) -> Validator:
        """The gate's checks as this store runs them (its routes, decode workers and check key), under
        `config`'s limits and admission terms: `transcript repair` judges an image with a provider's."""
        return Validator(config, self.routes, self.pool, self.checker)

    # -- reads -----------------------------------------------------------------------------------------------

    def scope(self, tenant: str | None) -> str | None:
        return self.reads.scope(tenant)

    async def meta(self, text: str, tenant: str | None = None) -> ImageRef:
        return await self.reads.meta(text, tenant)

    @overload
    async def read(
        self,
        text: str,
        tenant: str | None = None,
        claim: Callable[[int], None] | None = None,
        mapped: Literal[False] = False,
    ) -> tuple[ImageRef, bytes | bytearray]: ...

    @overload
    async def read(
        self, text: str, tenant: str | None, claim: Callable[[int], None] | None, mapped: bool
    ) -> tuple[ImageRef, bytes | bytearray | Mapped]: ...

    async def read(
        self,
        text: str,
        tenant: str | None = None,
        claim: Callable[[int], None] | None = None,
        mapped: bool = False,
    ) -> tuple[ImageRef, bytes | bytearray | Mapped]:
        return await self.reads.read(text, tenant, claim, mapped)

    def read_remembered(
        self, text: str, tenant: str | None = None, mapped: bool = False
    ) -> tuple[ImageRef, bytearray | Mapped] | None:
        return self.reads.read_remembered(text, tenant, mapped)

    async def rows(self, refs: Sequence[str], scope: str | None) -> dict[str, ObjectRow]:
        return await self.index.get_many(refs, scope)

    async def verified(self, ref: Ref, row: ObjectRow, scope: str | None) -> tuple[ImageRef, bytes]:
        return await self.reads.verified(ref, row, scope)

    async def verified_many(
        self, wanted: Sequence[tuple[Ref, ObjectRow]], scope: str | None
    ) -> list[bytes | bytearray | None]:
        return await self.reads.verified_many(wanted, scope)

    # -- variants and previews -------------------------------------------------------------------------------

    async def variant(
        self, source: ObjectRow, spec: VariantSpec, tenant: str | None = "", *, again: bool = False
    ) -> ObjectRow:
        return await self.variants.variant(source, spec, tenant, again=again)

    async def read_variant(
        self, source: ObjectRow, variant: ObjectRow, spec: VariantSpec, tenant: str | None = ""
    ) -> tuple[ImageRef, bytes]:
        return await self.variants.read(source, variant, spec, tenant)

    async def preview(self, text: str, size: int, tenant: str | None) -> tuple[ImageRef, bytes | bytearray]:
        return await self.previews.preview(text, size, tenant)

    async def preview_ref(self, text: str, size: int, tenant: str | None) -> str | None:
        return await self.previews.current(text, size, tenant)

    # -- figures and maintenance -----------------------------------------------------------------------------

    async def stats(self) -> tuple[int, int]:
        return await self.index.stats()

    async def runs(self) -> dict[str, tuple[float, dict[str, float]]]:
        return await self.index.runs()

    # -- what the operator page looks up (api/ui) ------------------------------------------------------------

    async def holders(self, text: str, tenant: str, after: str = "", limit: int = 100) -> list[str]:
        """The ids of `tenant`'s sessions that hold the object, a page after the id `after`."""
        return await self.index.holders(str(Ref.parse(text)), tenant, after, limit)

    async def quarantined(self, tenant: str, after: str = "", limit: int = 100) -> list[ObjectRow]:
        """The quarantined objects `tenant` may see, a page after the ref `after`."""
        return await self.index.quarantined(self.scope(tenant), after, limit)

    async def discard_object(self, ref: str) -> None:
        await self.publisher.discard(ref)

    @classmethod
    async def open(
        cls,
        config: Config,
        ops: FileOps | None = None,
        workers: int | None = None,
        *,
        read_cache: bool = True,
        policy: Role = "apply",
        replace_policy: bool = False,
    ) -> Store:
        """Commands pass `read_cache=False`: a read cache belongs to one daemon process. `policy`: see
        storepolicy.take_policy."""
        if not read_cache and config.storage.cache_dir:
            config = msgspec.structs.replace(
                config, storage=msgspec.structs.replace(config.storage, cache_dir=None)
            )
        checker = checkkey.checker(config)  # before anything is opened: a bad key stops here
        blobs = _blob_store(config, ops)
        await blobs.start()
        try:
            index = await _open_index(config)
        except BaseException:
            await blobs.close()
            raise
        try:
            applied = await take_policy(config, index, policy, replace=replace_policy)
        except BaseException:
            await index.close()
            await blobs.close()
            raise
        config = applied.config
        pool = DecodePool(
            workers or config.admission.workers, config.admission.decode_timeout_seconds, Metrics()
        )
        store = cls(config, blobs, index, pool, applied.catalog, checker)
        store.policy = applied
        if applied.node is not None:
            applied.node.start()
        return store

    async def stopping(self) -> None:
        if self.policy is not None and self.policy.node is not None:
            await self.policy.node.stopping()

    async def close(self) -> None:
        if self.policy is not None and self.policy.node is not None:
            await self.policy.node.close()
        await self.figures.close()
        await self.admissions.close()
        await self.variants.close()
        await self.pool.close()
        await self.index.close()
        if self.resident is not None:
            self.resident.close()
        await self.blobs.close()

    def sweep_reads(self) -> None:
        if self.resident is not None and self.resident.mappings is not None:
            self.resident.mappings.sweep()

    def watch_leases(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None] | None:
        """Run on the lease-break signal, so that a writer waits only until the loop gets to it."""
        mappings = self.resident.mappings if self.resident is not None else None
        if mappings is None or not watch(mappings, loop):
            return None

        def stop() -> None:
            loop.remove_signal_handler(BREAK_SIGNAL)

        return stop

    async def ready(self) -> None:
        limits = self.config.limits
        await self.index.ready()
        if self.policy is not None and self.policy.node is not None:
            await self.policy.node.check()
        await self.blobs.probe_writable(limits.max_batch_bytes, limits.max_batch_images)


def _blob_store(config: Config, ops: FileOps | None) -> BlobStore:
    storage = config.storage
    if storage.backend == "local":
        return LocalBackend(LocalBlobStore(config.data_path, ops))
    try:
        from ..storage.s3 import S3BlobStore
    except ImportError as e:  # the s3 extra is not installed
        raise ConfigError(
            f'storage.backend = "s3" needs aiobotocore (the s3 extra): install attachstore with it, '
            f"`pip install '.[s3]'` in its checkout, or add it to attachstore's environment ({e})"
        ) from e
    cache = None
    if storage.cache_dir:
        cache = ReadCache(Path(storage.cache_dir), storage.cache_max_bytes)
    return S3BlobStore(
        storage.endpoint,
        storage.bucket,
        storage.prefix,
        storage.region,
        storage.access_key_id,
        storage.secret_access_key,
        cache=cache,
        max_connections=storage.max_connections,
    )


async def _open_index(config: Config) -> Index:
    if config.index.backend == "sqlite":
        # With the bytes on S3 nothing else has made the data dir.
        await asyncio.to_thread(config.data_path.mkdir, 0o700, True, True)
        return await SqliteIndex.open(config.data_path / "index.sqlite3")
    try:
        from ..index.postgres import PgIndex
    except ImportError as e:  # the postgresql extra is not installed
        raise ConfigError(
            f'index.backend = "postgresql" needs asyncpg (the postgresql extra): install attachstore '
            f"with it, `pip install '.[postgresql]'` in its checkout, or add it to attachstore's "
            f"environment ({e})"
        ) from e
    if not config.index.dsn:  # config.load refuses this; a Config built in code may not have been loaded
        raise ConfigError("index.dsn: the postgresql backend needs a DSN")
    return await PgIndex.open(config.index.dsn, max_size=config.index.max_connections)
