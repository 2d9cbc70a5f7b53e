"""`attachstore migrate`: copy a single-node store (local files + SQLite) into the backends of another
configuration, resumably, then verify the copy. Every step is idempotent and skips what the target already
has; the steps and why a run cut short is finished by running it again: docs/scale-out.md, "Why a
migration can always be run again"."""

from __future__ import annotations

import asyncio
import itertools
import os
import tomllib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import SECTION_ENV_KEYS, Config, load
from ..errors import AttachstoreError, ConfigError, Corrupt, Missing
from ..index import Hold, ObjectRow, SessionRow
from ..progress import Progress
from ..refs import Ref
from ..service import Store
from ..storage import LocalBlobStore
from .source import INDEX_FILE, Snapshot, read_source
from .stage import Finding, MakeProgress, Report, Stage, read_failure, run_all
from .verify import Verify

JOBS = 8  # objects read, written or verified at once: bounds memory to JOBS objects' bytes
BATCH = 64  # rows per publishing transaction


# -- configurations -------------------------------------------------------------------------------------


def target_config(path: str, env: Mapping[str, str] | None = None) -> Config:
    """The target's configuration: the file, with only the secret variables of the environment
    ($ATTACHSTORE_INDEX_DSN, $ATTACHSTORE_S3_*); $ATTACHSTORE_DATA_DIR names the source."""
    env = os.environ if env is None else env
    config = load(path, env={k: env[k] for k in SECTION_ENV_KEYS if env.get(k)})
    if config.storage.backend == "local" or config.index.backend == "sqlite":
        with open(path, "rb") as f:
            if "data_dir" not in tomllib.load(f):
                raise ConfigError(
                    f"{path}: data_dir: a target with local storage or a SQLite index needs its data_dir in "
                    "the file"
                )
    return config


def check_pair(source: Config, target: Config) -> None:
    if source.storage.backend != "local":
        raise ConfigError(
            f"storage.backend: the source of a migration is a single-node store (local files and SQLite), "
            f'not "{source.storage.backend}"'
        )
    if source.index.backend != "sqlite":
        raise ConfigError(
            f"index.backend: the source of a migration is a single-node store (local files and SQLite), "
            f'not "{source.index.backend}"'
        )
    if not (source.data_path / INDEX_FILE).exists():
        raise ConfigError(f"no attachstore store at {source.data_dir}")
    if target.index.backend == "sqlite" and _same_dir(source.data_path, target.data_path):
        raise ConfigError(
            f"the target is the source: both use the index in {source.data_dir} "
            '(give the target another data_dir, or [index] backend = "postgresql")'
        )


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


# -- running --------------------------------------------------------------------------------------------


async def run(
    source: Config, target: Config, *, verify_only: bool = False, progress: MakeProgress = Progress
) -> Report:
    check_pair(source, target)
    snapshot = await asyncio.to_thread(read_source, source.data_path / INDEX_FILE)
    blobs = LocalBlobStore(source.data_path)
    # Without the read cache: the verification reads the bucket, not a local copy.
    store = await Store.open(target, workers=1, read_cache=False, policy="none")
    try:
        report = Report()
        for r in snapshot.rows.values():
            if r.state != "ok":
                report.not_copied.append(Finding(r.state, r.ref, f"marked {r.state} in the source"))
        if not verify_only:
            await _Copy(snapshot, blobs, store, report, progress).run()
        await Verify(snapshot, blobs, store, report, progress, heal=not verify_only, jobs=JOBS).run()
        return report
    finally:
        await store.close()


Step = tuple[str | None, str | None]  # one publish: the tenant granted (None: no grant), its display name


@dataclass(frozen=True, slots=True)
class _Work:
    row: ObjectRow
    steps: list[Step]  # what the target still lacks, if its object is in place
    every_step: list[Step]  # what a copy publishes
    in_target: bool  # its row is there: check the object's size, and copy it only if that fails


@dataclass(frozen=True, slots=True)
class _Ready:
    row: ObjectRow
    steps: list[Step]
    copied: bool  # its bytes were copied (else only grants are published)


class _Copy(Stage):
    def __init__(
        self, snapshot: Snapshot, source: LocalBlobStore, store: Store, report: Report, progress: MakeProgress
    ) -> None:
        super().__init__(snapshot, source, store, report, progress)
        self.copied: set[str] = set()  # refs whose rows and objects the target has now

    async def run(self) -> None:
        await self._objects(await self._plan())
        await self._variants()
        await self._sessions()
        await self._runs()
        await self._leases()

    async def _plan(self) -> list[_Work]:
        wanted = self.snapshot.wanted()
        target = {r.ref: r for r in await self.store.index.rows()}
        by_tenant: dict[str, list[str]] = {}
        for ref in wanted:
            for tenant, _ in self.snapshot.grants.get(ref, ()):
                by_tenant.setdefault(tenant, []).append(ref)
        granted = {t: set(await self.store.index.get_many(refs, t)) for t, refs in by_tenant.items()}
        work = []
        for ref, row in wanted.items():
            grants = self.snapshot.grants.get(ref)
            # The grant with the object's own name goes first: the first publish names the object.
            steps: list[Step] = (
                sorted(grants, key=lambda g: g[1] != row.name) if grants else [(None, row.name)]
            )
            found = target.get(ref)
            if found is not None:  # publishing sets the lease: never move one back (a daemon may serve it)
                row = row._replace(lease_at=max(row.lease_at, found.lease_at))
            if found is not None and _same_object(found, row):
                lacking = [s for s in steps if s[0] is not None and ref not in granted[s[0]]]
                work.append(_Work(row, lacking, steps, in_target=True))
            else:
                work.append(_Work(row, steps, steps, in_target=False))
        return work

    async def _objects(self, work: list[_Work]) -> None:
        progress = self.progress("migrate", len(work), sum(w.row.bytes for w in work))
        ready: asyncio.Queue[_Ready | None] = asyncio.Queue(maxsize=2 * BATCH)
        pending = iter(work)

        async def copy() -> None:
            for w in pending:  # shared by the copiers: each takes the next object
                ref = Ref.parse(w.row.ref)
                if w.in_target:
                    found = await self.store.blobs.stat(ref)
                    if found is not None and found.size == w.row.bytes:
                        if w.steps:
                            await ready.put(_Ready(w.row, w.steps, copied=False))
                        else:
                            self.copied.add(w.row.ref)
                            self.report.skipped += 1
                            progress.advance(1, w.row.bytes)
                        continue
                try:
                    data = await self.source.read(ref, w.row.bytes)
                except (Corrupt, Missing) as e:
                    self.report.failed.append(read_failure(w.row.ref, e))
                    progress.advance(1, w.row.bytes)
                    continue
                await self.store.blobs.put(ref, data)
                del data
                await ready.put(_Ready(w.row, w.every_step, copied=True))

        async def copiers() -> None:
            await run_all(copy() for _ in range(JOBS))
            await ready.put(None)

        async def publisher() -> None:
            done = False
            while not done and (item := await ready.get()) is not None:
                batch = [item]
                while len(batch) < BATCH and not ready.empty():
                    if (item := ready.get_nowait()) is None:
                        done = True
                        break
                    batch.append(item)
                await self._publish(batch, progress)

        try:
            await run_all([copiers(), publisher()])
        finally:
            progress.finish()

    async def _publish(self, batch: list[_Ready], progress: Progress) -> None:
        # An object's first step names it; later steps only add grants (a name, once set, stays).
        for i in range(max(len(r.steps) for r in batch)):
            groups: dict[str | None, list[ObjectRow]] = {}
            for r in batch:
                if i < len(r.steps):
                    tenant, name = r.steps[i]
                    groups.setdefault(tenant, []).append(r.row._replace(name=name))
            for tenant, rows in groups.items():
                await self.store.index.publish(rows, self._in_place(rows), None, tenant)
        for r in batch:
            self.copied.add(r.row.ref)
            if r.copied:
                self.report.objects += 1
                self.report.bytes += r.row.bytes
            else:
                self.report.skipped += 1
                self.report.grants += len(r.steps)
            progress.advance(1, r.row.bytes)

    def _in_place(self, rows: Sequence[ObjectRow]) -> Callable[[], Awaitable[None]]:

        async def check() -> None:
            found = await asyncio.gather(*(self.store.blobs.stat(Ref.parse(r.ref)) for r in rows))
            for r, f in zip(rows, found, strict=True):
                if f is None or f.size != r.bytes:
                    raise AttachstoreError(
                        f"{r.ref} left the target right after it was written: is a gc removing objects "
                        "there? Stop it and run migrate again"
                    )

        return check

    async def _variants(self) -> None:
        for link in self.snapshot.variants:
            if not {link.source, link.variant} <= self.copied:
                what = f"{link.source} {link.spec}"
                self.report.not_copied.append(
                    Finding("variant", what, f"links {link.variant}; not both copied")
                )
                continue
            found = await self.store.index.variant(link.source, link.spec)
            if found is not None and found.row.ref == link.variant:
                continue
            # Publishing the link publishes the variant's row again: with its lease, never moved back.
            row = self.snapshot.rows[link.variant]
            there = await self.store.index.get(link.variant)
            row = row._replace(lease_at=max(row.lease_at, there.lease_at if there else 0.0))
            # Its check goes with it: where it does not hold (another check key, none), the target derives
            # the variant again when it is first wanted, as for any link whose check does not hold.
            in_place = self._in_place([row])
            if await self.store.index.publish_variant(row, link.source, link.spec, in_place, link.check):
                self.report.variants += 1

    async def _sessions(self) -> None:
        for s in self.snapshot.sessions:
            for h in s.holds:
                if h.ref not in self.copied:
                    what = f"{s.tenant}/{s.id}"
                    self.report.not_copied.append(Finding("hold", what, f"holds {h.ref}, not copied"))
            current = await self.store.index.get_session(s.key)
            if current is None:
                current, _ = await self.store.index.create_session(s.key, s.route, s.created_at)
                self.report.sessions += 1
            elif current.route != s.route:
                continue  # another session by that name: the verification reports it
            held = set(current.holds)
            hold = Hold(s.key, _accept, everything=True)
            kept = [h for h in s.holds if h.ref in self.copied]
            # One add_holds per original time: the order within it is kept, and so is the time.
            for at, group in itertools.groupby(kept, key=lambda h: h.created_at):
                refs = [h.ref for h in group]
                if not set(refs) <= held:
                    await self.store.index.add_holds(hold, refs, at)
                    self.report.holds += len(set(refs) - held)
            # The source's lifetime and last use (forward only: a daemon on the target may have renewed it).
            await self.store.index.keep_lifetime(s.key, s.ttl, s.used_at)

    async def _runs(self) -> None:
        there = await self.store.index.runs()
        for command, (at, figures) in self.snapshot.runs.items():
            if command not in there or there[command][0] < at:
                await self.store.index.record_run(command, figures, now=at)
                self.report.runs += 1

    async def _leases(self) -> None:
        # Set forward only, never back: a daemon serving the target may have renewed a lease, for an answer
        # that the grace period must protect.
        stale: dict[float, list[str]] = {}
        for r in await self.store.index.rows():
            source = self.snapshot.rows.get(r.ref)
            if source is not None and r.ref in self.copied and r.lease_at < source.lease_at:
                stale.setdefault(source.lease_at, []).append(r.ref)
        for lease, refs in stale.items():
            await self.store.index.renew(refs, lease)


def _accept(session: SessionRow) -> None:
    # The holds a migration copies were accepted when they were made.
    ...


def _same_object(target: ObjectRow, source: ObjectRow) -> bool:
    # All but what the later steps set (lease) or cannot change (name).
    fields = ("media_type", "bytes", "width", "height", "frames", "created_at")
    return target.state == "ok" and all(getattr(target, f) == getattr(source, f) for f in fields)
