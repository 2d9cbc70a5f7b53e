"""The service: the one place that owns the order of operations. Edges (HTTP, CLI) call it; it calls the
gate (through the decode pool), the blob store and the index."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from .. import gate
from ..config import Config
from ..errors import (
    AttachstoreError,
    ConfigError,
    Corrupt,
    InvalidRequest,
    Missing,
    NotFound,
    Rejected,
    ServerBusy,
    StorageUnavailable,
)
from ..gate import DecodePool, Original, Passed, probe_header
from ..index import Hold, Index, ObjectRow
from ..metrics import Metrics
from ..refs import Ref
from ..storage import BlobStore, FileOps, LocalBackend, LocalBlobStore, Put, Resident
from . import policy
from .policy import Diagnostic
from .sessions import Sessions

if TYPE_CHECKING:
    from ..index.postgres import PgIndex

SOURCES = ("user", "tool", "mcp", "command")
MAX_NAME_LENGTH = 255
_PUBLISH_ATTEMPTS = 3
# A variant that could not be made is not tried again for this long (renders of a conversation repeat):
# a failure costs up to decode_timeout of a decode worker. At most _UNFIT_KEPT are remembered.
_UNFIT_SECONDS = 600.0
_UNFIT_KEPT = 10_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Upload:
    """One image handed to admission: base64 text (JSON) or raw bytes (multipart, CLI).

    `size` is the decoded size; an edge that stopped buffering an oversized part passes its full size here."""

    payload: str | bytes
    size: int
    media_type: str | None = None
    name: str | None = None

    @classmethod
    def of_bytes(cls, data: bytes, media_type: str | None = None, name: str | None = None) -> Upload:
        return cls(data, len(data), media_type, name)

    @classmethod
    def of_base64(cls, text: str, media_type: str | None = None, name: str | None = None) -> Upload:
        return cls(text, gate.base64_decoded_size(text), media_type, name)


@dataclass(frozen=True, slots=True)
class Normalization:
    """What admission did to an upload before storing it (docs/normalization.md)."""

    original: Original  # the upload as it came
    steps: tuple[str, ...]  # "orientation", "colour", "metadata", "resized", "reencoded"


@dataclass(frozen=True, slots=True)
class ImageRef:
    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None
    normalized: Normalization | None = None


@dataclass(frozen=True, slots=True)
class _Admitted:
    ref: Ref
    data: bytes  # what is stored: the upload, or its normalization
    inspection: Passed

    @property
    def normalized(self) -> Normalization | None:
        original = self.inspection.original
        return None if original is None else Normalization(original, tuple(self.inspection.steps))


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to an admission: refs in input order, or (soft rejection) a diagnostic per image."""

    attachments: list[ImageRef]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    text: str | None = None

    @property
    def degraded(self) -> bool:
        return bool(self.diagnostics)


def _degraded(
    uploads: Sequence[Upload],
    names: Sequence[str | None],
    batch_error: Rejected | None,
    verdicts: Sequence[_Admitted | Rejected],
) -> Admission:
    diagnostics = []
    for i, (u, name) in enumerate(zip(uploads, names, strict=True)):
        verdict: _Admitted | Rejected | None = batch_error or (verdicts[i] if i < len(verdicts) else None)
        if isinstance(verdict, _Admitted):
            diagnostics.append(Diagnostic(i, verdict.inspection.media_type, name, None, "valid"))
        elif isinstance(verdict, Rejected):
            diagnostics.append(Diagnostic(i, u.media_type, name, verdict.code, verdict.message, verdict.hint))
    return Admission([], diagnostics, policy.model_text(diagnostics))


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """The per-image limits of a route's requests; a stored image over one of them is sent as a variant."""

    max_side: int
    max_pixels: int
    max_bytes: int

    @property
    def key(self) -> str:
        # Names the derivation: the same source and key always give the same bytes (normalize.fit).
        return f"fit/1 side={self.max_side} pixels={self.max_pixels} bytes={self.max_bytes}"

    def exceeded_by(self, row: ObjectRow) -> bool:
        return (
            max(row.width, row.height) > self.max_side
            or row.width * row.height > self.max_pixels
            or row.bytes > self.max_bytes
        )


class _FileGone(Exception):
    """An object file vanished between its write and the commit that publishes it."""


def display_name(name: str | None) -> str | None:
    """Keep only the last path component, without control characters, at most 255 characters."""
    if name is None:
        return None
    base = _CONTROL.sub("", name.replace("\\", "/").rsplit("/", 1)[-1]).strip()
    return base[:MAX_NAME_LENGTH] or None


def image_ref(row: ObjectRow, name: str | None = None) -> ImageRef:
    return ImageRef(row.ref, row.media_type, row.bytes, row.width, row.height, row.frames, name or row.name)


class Store:
    def __init__(self, config: Config, blobs: BlobStore, index: Index | PgIndex, pool: DecodePool) -> None:
        self.config = config
        self.blobs = blobs
        # The file-system store behind the local backend, for what only it has (staging files, the audit's
        # direct walk); None on S3.
        self.local = blobs.blobs if isinstance(blobs, LocalBackend) else None
        self.resident = Resident(self.local) if self.local is not None else None
        self.index = index
        self.pool = pool
        self.sessions = Sessions(config, index)
        self.metrics = Metrics()
        self._admitting = 0
        self._deriving: dict[tuple[str, str], asyncio.Future[ObjectRow]] = {}
        # (source, spec) whose derivation failed in the decode pool, until when, and why.
        self._unfit: dict[tuple[str, str], tuple[float, Rejected]] = {}

    @classmethod
    async def open(
        cls,
        config: Config,
        ops: FileOps | None = None,
        workers: int | None = None,
        *,
        read_cache: bool = True,
    ) -> Store:
        """The configured backends, opened. Commands pass `read_cache=False`: a read cache directory belongs
        to one daemon process, and a command has nothing to gain from one."""
        if not read_cache and config.storage.cache_dir:
            config = msgspec.structs.replace(
                config, storage=msgspec.structs.replace(config.storage, cache_dir=None)
            )
        blobs = _blob_store(config, ops)
        await blobs.start()
        try:
            index = await _open_index(config)
        except BaseException:
            await blobs.close()
            raise
        pool = DecodePool(workers or config.admission.workers, config.admission.decode_timeout_seconds)
        return cls(config, blobs, index, pool)

    async def close(self) -> None:
        for task in list(self._deriving.values()):
            task.cancel()
        await asyncio.gather(*self._deriving.values(), return_exceptions=True)
        await self.pool.close()
        await self.index.close()
        await self.blobs.close()

    # -- admission -------------------------------------------------------------------------------------

    async def admit(
        self,
        uploads: Sequence[Upload],
        source: str,
        *,
        route: str | None = None,
        session: str | None = None,
        tenant: str = "",
    ) -> Admission:
        """Validate every member, then store every member, then publish all rows (and the session's holds)
        in one transaction. A rejection raises for `user`/`command` and degrades for `tool`/`mcp`."""
        if source not in SOURCES:
            raise InvalidRequest(f"source: must be one of {', '.join(SOURCES)}, not {source!r}")
        if not uploads:
            raise InvalidRequest("images: at least one image is required")
        if self._admitting >= self.config.admission.max_concurrent:
            # Past the cap, admissions wait outside rather than queue for the decoders; reads keep flowing.
            self.metrics.admissions.labels(source, ServerBusy.code).inc()
            raise ServerBusy(
                f"{self._admitting} admissions are in progress, the most this daemon takes at once",
                hint="retry after the Retry-After delay",
            )
        self._admitting += 1
        result = "admitted"
        try:
            admission = await self._admit(uploads, source, route, session, tenant)
            if admission.degraded:
                result = next((d.code for d in admission.diagnostics if d.code), "degraded")
            return admission
        except AttachstoreError as e:
            result = e.code
            raise
        finally:
            self._admitting -= 1
            self.metrics.admissions.labels(source, result).inc()

    async def _admit(
        self, uploads: Sequence[Upload], source: str, route: str | None, session: str | None, tenant: str
    ) -> Admission:
        hold = session_route = None
        if session is not None:
            found = await self.sessions.get((tenant, session))
            route = route if route is not None else found.route
            session_route = found.route
            hold = Hold((tenant, session), self.sessions.guard_images, everything=self.config.is_open)
        names = [display_name(u.name) for u in uploads]
        soft = source in policy.SOFT_SOURCES
        batch_error, verdicts = await self._validate(
            uploads, source, route, every_image=soft, session=(session, session_route)
        )
        if batch_error is not None or any(isinstance(v, Rejected) for v in verdicts):
            if soft:
                return _degraded(uploads, names, batch_error, verdicts)
            if batch_error is not None:
                raise batch_error
            i, first = next((i, v) for i, v in enumerate(verdicts) if isinstance(v, Rejected))
            raise first.at(i)
        admitted = [v for v in verdicts if isinstance(v, _Admitted)]
        try:
            await self._store(admitted, names, hold, tenant)
        except Rejected as e:  # the session's route turned text-only meanwhile (checked under the lock)
            if soft:
                return _degraded(uploads, names, e, [])
            raise
        self.metrics.images_admitted.inc(len(admitted))
        self.metrics.normalized.inc(sum(1 for a in admitted if a.normalized is not None))
        self.metrics.bytes_admitted.inc(sum(len(a.data) for a in admitted))
        return Admission(
            [
                ImageRef(
                    str(a.ref),
                    a.inspection.media_type,
                    len(a.data),
                    a.inspection.width,
                    a.inspection.height,
                    a.inspection.frames,
                    name,
                    a.normalized,
                )
                for a, name in zip(admitted, names, strict=True)
            ]
        )

    async def _validate(
        self,
        uploads: Sequence[Upload],
        source: str,
        route: str | None,
        *,
        every_image: bool,
        session: tuple[str | None, str | None] = (None, None),
    ) -> tuple[Rejected | None, list[_Admitted | Rejected]]:
        """The gate of SPEC section 4: a batch-level failure, or a verdict per image.

        Without `every_image`, images after the first cheap failure are not looked at: the first failure in
        input order decides, exactly as if the images were checked one after another, while the expensive
        checks of the images before it run concurrently."""
        limits = self.config.limits
        admission = self.config.admission
        fit_limits = admission.fit_limits(limits) if admission.oversize == "fit" else None
        try:
            policy.check_modality(self.config.routes, route, source)
            if session[0] is not None:
                policy.check_session(self.config.routes, session[0], session[1])
            gate.check_batch([u.size for u in uploads], limits)
        except Rejected as e:
            return e, []
        cheap: list[bytes | Rejected] = []
        for u in uploads:
            try:
                data = gate.decode_base64(u.payload) if isinstance(u.payload, str) else u.payload
                gate.precheck(u.size, data[:64], u.media_type, fit_limits or limits)
                cheap.append(data)
            except Rejected as e:
                cheap.append(e)
                if not every_image:
                    break
        deep = await asyncio.gather(
            *(
                self.pool.inspect(
                    c,
                    u.media_type,
                    limits,
                    self.config.hash,
                    trailing_data=admission.trailing_data,
                    fit_limits=fit_limits,
                    strip_metadata=admission.strip_metadata,
                )
                for c, u in zip(cheap, uploads, strict=False)
                if not isinstance(c, Rejected)
            ),
            return_exceptions=True,
        )
        results = iter(deep)
        verdicts: list[_Admitted | Rejected] = []
        for c in cheap:
            if isinstance(c, Rejected):
                verdicts.append(c)
                continue
            r = next(results)
            if isinstance(r, Passed):
                verdicts.append(
                    _Admitted(Ref(self.config.hash, r.digest), c if r.data is None else r.data, r)
                )
            elif isinstance(r, Rejected):
                verdicts.append(r)
            else:
                raise r
        return None, verdicts

    async def _store(
        self, admitted: Sequence[_Admitted], names: Sequence[str | None], hold: Hold | None, tenant: str
    ) -> None:
        unique: dict[Ref, _Admitted] = {}
        first_name: dict[Ref, str | None] = {}
        for a, name in zip(admitted, names, strict=True):
            unique.setdefault(a.ref, a)
            if first_name.get(a.ref) is None:
                first_name[a.ref] = name
        try:
            for _ in range(_PUBLISH_ATTEMPTS):
                try:
                    await self._store_once(list(unique.values()), first_name, hold, tenant)
                    return
                except _FileGone:
                    continue
            raise AttachstoreError("an object kept disappearing while it was being published")
        except BaseException:
            # Publish nothing: remove the files this batch may have put in place that no row publishes.
            await self.index.discard_unpublished([str(r) for r in unique], self.discard_object)
            raise

    async def _store_once(
        self, admitted: Sequence[_Admitted], names: dict[Ref, str | None], hold: Hold | None, tenant: str
    ) -> None:
        now = time.time()
        # Renew first: from here on a concurrent GC leaves these objects alone; then verify or (re)write.
        existing = await self.index.renew([str(a.ref) for a in admitted], now)
        # Wait for every write, even after one failed, so that the cleanup sees all of them.
        puts = await asyncio.gather(
            *(self.blobs.put(a.ref, a.data) for a in admitted), return_exceptions=True
        )
        for outcome in puts:
            if isinstance(outcome, BaseException):
                raise outcome
        self.metrics.dedup_hits.inc(sum(1 for p in puts if p is Put.EXISTED))
        # A heal: damaged bytes replaced, or a file written again for an object the index already had.
        healed = [
            p is Put.HEALED or (p is Put.CREATED and str(a.ref) in existing)
            for a, p in zip(admitted, puts, strict=True)
        ]
        self.metrics.heals.inc(sum(healed))
        rows = [
            ObjectRow(
                ref=str(a.ref),
                media_type=a.inspection.media_type,
                bytes=len(a.data),
                width=a.inspection.width,
                height=a.inspection.height,
                frames=a.inspection.frames,
                name=names.get(a.ref),
                created_at=existing[str(a.ref)].created_at if str(a.ref) in existing else now,
                lease_at=now,
            )
            for a in admitted
        ]

        async def files_still_there() -> None:
            await self._still_there([(a.ref, len(a.data)) for a in admitted])

        await self.index.publish(rows, files_still_there, hold, tenant)

    async def _still_there(self, objects: Sequence[tuple[Ref, int]]) -> None:
        """Raise _FileGone unless every object's file is in place with its size (run under the write lock,
        just before the transaction that publishes them)."""

        found = await self.blobs.stat_many([ref for ref, _ in objects])
        for (ref, size), f in zip(objects, found, strict=True):
            if f is None or f.size != size:
                raise _FileGone(str(ref))

    async def discard_object(self, ref: str) -> None:
        await self.blobs.discard(Ref.parse(ref))

    # -- request variants ------------------------------------------------------------------------------

    async def variant(self, source: ObjectRow, spec: VariantSpec, *, again: bool = False) -> ObjectRow:
        """The row of `source`'s variant within `spec`: found in the index, else derived in the decode pool,
        stored like any object and linked to its source. Concurrent callers in this process share one
        derivation. `again` derives even when a variant is recorded (its bytes failed a read: the same
        bytes are derived and written again, which heals them). Raises AttachstoreError (the source is
        unreadable, or no variant fits)."""
        key = (source.ref, spec.key)
        if not again:
            found = await self.index.variant(*key)
            if found is not None and found.state == "ok":
                self.metrics.variants.labels("cached").inc()
                return found
        failed = self._unfit.get(key)
        if failed is not None and failed[0] > time.monotonic():
            why = failed[1]  # it failed a moment ago: the same work would fail the same way
            raise Rejected(why.code, why.message, hint=why.hint)
        task = self._deriving.get(key)
        if task is None:
            task = asyncio.ensure_future(self._derive(source, spec))
            self._deriving[key] = task
            task.add_done_callback(lambda t: (self._deriving.pop(key, None), t.cancelled() or t.exception()))
        try:
            return await asyncio.shield(task)
        except Rejected as e:  # no variant fits, or past the time bound: remembered for a while
            self._unfit[key] = (time.monotonic() + _UNFIT_SECONDS, e)
            if len(self._unfit) > _UNFIT_KEPT:
                now = time.monotonic()
                self._unfit = {k: v for k, v in self._unfit.items() if v[0] > now}
            raise

    async def _derive(self, source: ObjectRow, spec: VariantSpec) -> ObjectRow:
        _, data = await self.verified(Ref.parse(source.ref), source)
        limits = self.config.limits
        target = msgspec.structs.replace(
            limits, max_side=spec.max_side, max_pixels=spec.max_pixels, max_image_bytes=spec.max_bytes
        )
        source_limits = self.config.admission.fit_limits(limits)
        passed = await self.pool.derive(
            data,
            source.media_type,
            (spec.max_side, spec.max_pixels, spec.max_bytes),
            target,
            source_limits,
            self.config.hash,
        )
        if passed.data is None:  # pragma: no cover - a derivation always answers with its bytes
            raise AttachstoreError("the decode worker answered a derivation without bytes")
        ref, derived = Ref(self.config.hash, passed.digest), passed.data
        for _ in range(_PUBLISH_ATTEMPTS):
            try:
                row = await self._store_variant(ref, derived, passed, source.ref, spec.key)
                break
            except _FileGone:  # collected (as another source's variant, say) between its write and its link
                continue
        else:
            raise StorageUnavailable(f"the variant {ref} kept disappearing while it was being published")
        self.metrics.variants.labels("derived").inc()
        return row

    async def _store_variant(
        self, ref: Ref, derived: bytes, passed: Passed, source: str, spec: str
    ) -> ObjectRow:
        """Renew, write and link a derived object, as an admission stores one (raises _FileGone to retry)."""
        now = time.time()
        existing = await self.index.renew([str(ref)], now)  # as an admission: GC leaves it alone from here
        created = existing[str(ref)].created_at if str(ref) in existing else now
        row = ObjectRow(
            str(ref),
            passed.media_type,
            len(derived),
            passed.width,
            passed.height,
            passed.frames,
            None,
            created,
            now,
        )
        try:
            await self.blobs.put(ref, derived)

            async def file_still_there() -> None:
                await self._still_there([(ref, len(derived))])

            if not await self.index.publish_variant(row, source, spec, file_still_there):
                raise NotFound(f"no attachment {source}: it was collected while its variant was made")
        except BaseException:
            await self.index.discard_unpublished([str(ref)], self.discard_object)
            raise
        return row

    # -- reads -----------------------------------------------------------------------------------------

    def scope(self, tenant: str | None) -> str | None:
        """Whose grants bound what a caller sees: None (everything) for the operator, and for everyone
        while no tokens are configured."""
        return None if self.config.is_open else tenant

    async def _row(self, text: str, tenant: str | None) -> tuple[Ref, ObjectRow]:
        """The row of a ref the caller may see; one it may not see answers exactly like a missing one,
        before any file is touched."""
        return await self._row_of(Ref.parse(text), self.scope(tenant))

    async def _row_of(self, ref: Ref, scope: str | None) -> tuple[Ref, ObjectRow]:
        row = await self.index.get(str(ref), scope)
        if row is None:
            raise NotFound(f"no attachment {ref}")
        if row.state == "quarantined":
            raise Corrupt(f"the stored bytes of {ref} failed verification and were quarantined")
        return ref, row

    async def meta(self, text: str, tenant: str | None = None) -> ImageRef:
        _, row = await self._row(text, tenant)
        return image_ref(row)

    async def read(self, text: str, tenant: str | None = None) -> tuple[ImageRef, bytes | bytearray]:
        """Verified bytes: the whole object re-hashed, its header checked against the index."""
        ref = Ref.parse(text)
        scope = self.scope(tenant)
        resident = self.resident
        if resident is not None:
            # Without the index when this process served the same file to the same scope a moment ago.
            hit = resident.recall(ref, scope)
            if hit is not None:
                if _header_fits(hit[0], hit[1]):
                    self.metrics.reads_ok.inc()
                    return image_ref(hit[0]), hit[1]
                resident.forget(str(ref))
        try:
            ref, row = await self._row_of(ref, scope)
        except NotFound:
            self.metrics.reads.labels("not_found").inc()
            raise
        if resident is not None and row.state == "ok":
            found = resident.read(ref, row.bytes)
            if found is not None and _header_fits(row, found[0]):
                resident.remember(row, scope, found[1])
                self.metrics.reads_ok.inc()
                return image_ref(row), found[0]
        return await self.verified(ref, row)

    async def verified(self, ref: Ref, row: ObjectRow) -> tuple[ImageRef, bytes]:
        """The bytes of an object whose row the caller has already looked up (and may see): re-hashed in
        full and their header checked against the row, like every read."""
        try:
            found = await self._verified(ref, row)
        except (Corrupt, Missing) as e:
            kind = "corrupt" if isinstance(e, Corrupt) else "missing"
            self.metrics.reads.labels(kind).inc()
            self.metrics.integrity_failures.labels(kind).inc()
            raise
        self.metrics.reads_ok.inc()
        return found

    async def _verified(self, ref: Ref, row: ObjectRow) -> tuple[ImageRef, bytes]:
        try:
            # A row marked missing or quarantined is only set right by the store's own copy, not a cached one.
            data = await self.blobs.read(ref, row.bytes, fresh=row.state != "ok")
        except Missing:
            await self._set_state(row, "missing")
            raise
        except Corrupt:
            found = await self.blobs.quarantine(ref)
            if found != "intact":
                await self._set_state(row, found)
                if found == "missing":
                    raise Missing(f"the bytes of {ref} are missing from the store") from None
                raise
            data = await self.blobs.read(ref, row.bytes)  # healed meanwhile
        if row.state != "ok":
            await self._set_state(row, "ok")  # the file is back (restored, or healed by another process)
        if not _header_fits(row, data):
            # The bytes are the admitted ones (the hash matched), so the row is what is wrong: do not serve,
            # do not quarantine good bytes; admitting them again rewrites the row.
            raise Corrupt(f"the index entry of {ref} does not match its bytes")
        return image_ref(row), data

    async def _set_state(self, row: ObjectRow, state: str) -> None:
        if self.resident is not None:
            self.resident.forget(row.ref)
        await self.index.set_state(row, state)

    async def ready(self) -> None:
        await self.index.ping()
        await self.blobs.probe_writable()


def _header_fits(row: ObjectRow, data: bytes | bytearray) -> bool:
    """The bytes' header says what the index row says: type and dimensions."""
    header = probe_header(data)
    return header is not None and (header.media_type, header.width, header.height) == (
        row.media_type,
        row.width,
        row.height,
    )


def _blob_store(config: Config, ops: FileOps | None) -> BlobStore:
    storage = config.storage
    if storage.backend == "local":
        return LocalBackend(LocalBlobStore(config.data_path, ops))
    try:
        from ..storage.s3 import ReadCache, S3BlobStore
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
