"""The service: the one place that owns the order of operations. Edges (HTTP, CLI) call it; it calls the
gate (through the decode pool), the blob store and the index. `Store` opens the backends and composes the
parts, each in a module of its own: admissions, verified reads, request variants and sessions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ..config import Config
from ..errors import ConfigError
from ..gate import DecodePool
from ..index import Index
from ..metrics import Metrics
from ..refs import Checker
from ..storage import BlobStore, FileOps, LocalBackend, LocalBlobStore, ReadCache
from ..storage.mapped import BREAK_SIGNAL, watch
from . import checkkey
from .admission import Admissions
from .catalog import Catalog, builtin
from .policy import RouteTable
from .previews import Previews
from .publish import Publisher
from .reads import Reads
from .sessions import Sessions
from .storepolicy import Applied, Role, settle
from .variants import Variants

if TYPE_CHECKING:
    from ..index.postgres import PgIndex


class Store:
    def __init__(
        self,
        config: Config,
        blobs: BlobStore,
        index: Index | PgIndex,
        pool: DecodePool,
        catalog: Catalog | None = None,
        checker: Checker | None = None,
    ) -> None:
        self.config = config
        # The keyed check recorded at admission and verified by reads (docs/security.md).
        self.checker = checker or checkkey.checker(config)
        self.blobs = blobs
        # The file-system store behind the local backend, for what only it has (staging files, the audit's
        # direct walk); None on S3.
        self.local = blobs.blobs if isinstance(blobs, LocalBackend) else None
        self.index = index
        self.pool = pool
        self.metrics = pool.metrics  # the decode pool counts its jobs in the store's registry
        # The model declarations every check reads: the configured routes over the catalog.
        self.routes = RouteTable(config.routes, catalog or builtin())
        self.policy: Applied | None = None  # set by open(): the policy applied, and the daemon's node
        self.sessions = Sessions(config, index, self.routes)
        self.reads = Reads(config, blobs, index, self.local, self.metrics, self.checker)
        self.resident = self.reads.resident
        publisher = Publisher(blobs, index)
        self.admissions = Admissions(
            config, index, pool, self.sessions, publisher, self.metrics, self.checker
        )
        self.variants = Variants(
            config, index, pool, self.reads.verified, publisher, self.metrics, self.checker
        )
        previews = Previews(self.reads, self.variants)
        # What the edges call.
        self.admit = self.admissions.admit
        self.check = self.admissions.check
        self.admission_slot = self.admissions.slots.take
        self.body_slot = self.admissions.slots.body
        self.scope = self.reads.scope
        self.meta = self.reads.meta
        self.read = self.reads.read
        self.recalled = self.reads.recalled
        self.verified = self.reads.verified
        self.verified_many = self.reads.verified_many
        self.variant = self.variants.variant
        self.read_variant = self.variants.read
        self.preview = previews.preview
        self.preview_ref = previews.current
        self.discard_object = publisher.discard

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
        """The configured backends, opened. Commands pass `read_cache=False`: a read cache directory belongs
        to one daemon process, and a command has nothing to gain from one.

        `policy` says how the store's policy is taken (storepolicy.py): "serve" for a daemon (records its own,
        or refuses while a live node enforces another unless `replace_policy`), "apply" for a command that
        applies the routes or limits (adopts the record, or refuses if its own differs), "none" for one that
        applies neither. The store is opened with the configuration's policy keys replaced by the record's
        where it adopts them."""
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
            applied = await settle(config, index, policy, replace=replace_policy)
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
        """The daemon stops: it finishes what it has started, then closes. Its node says so meanwhile."""
        if self.policy is not None and self.policy.node is not None:
            await self.policy.node.stopping()

    async def close(self) -> None:
        if self.policy is not None and self.policy.node is not None:
            await self.policy.node.close()
        await self.admissions.close()
        await self.variants.close()
        await self.pool.close()
        await self.index.close()
        if self.resident is not None:
            self.resident.close()
        await self.blobs.close()

    def sweep_reads(self) -> None:
        """Let go of the mapped reads kept past their time, or whose file someone has asked to write to."""
        if self.resident is not None and self.resident.mappings is not None:
            self.resident.mappings.sweep()

    def watch_leases(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None] | None:
        """Sweep the mapped reads on the lease-break signal, from `loop`, so that a writer waits only until
        the loop gets to it: the function that stops it, or None where nothing is watched."""
        mappings = self.resident.mappings if self.resident is not None else None
        if mappings is None or not watch(mappings, loop):
            return None

        def stop() -> None:
            loop.remove_signal_handler(BREAK_SIGNAL)

        return stop

    async def ready(self) -> None:
        """Whether an admission can be written now (/readyz): the index answers and has room to grow, and the
        blob store takes a write and has room for the largest batch the limits admit."""
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
            f"storage.backend = \"s3\" needs aiobotocore: pip install 'attachstore[s3]' ({e})"
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


async def _open_index(config: Config) -> Index | PgIndex:
    if config.index.backend == "sqlite":
        # With the bytes on S3 nothing else has made the data dir.
        await asyncio.to_thread(config.data_path.mkdir, 0o700, True, True)
        return await Index.open(config.data_path / "index.sqlite3")
    try:
        from ..index.postgres import PgIndex
    except ImportError as e:  # the postgresql extra is not installed
        raise ConfigError(
            f"index.backend = \"postgresql\" needs asyncpg: pip install 'attachstore[postgresql]' ({e})"
        ) from e
    if not config.index.dsn:  # config.load refuses this; a Config built in code may not have been loaded
        raise ConfigError("index.dsn: the postgresql backend needs a DSN")
    return await PgIndex.open(config.index.dsn, max_size=config.index.max_connections)
