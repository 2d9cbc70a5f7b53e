"""The verification step of `attachstore migrate`: every copied object read back from the target, every
row compared with the source (docs/scale-out.md, "Why a migration can always be run again"). It writes
nothing but healed objects."""

from __future__ import annotations

from ..errors import Corrupt, Missing
from ..index import ObjectRow
from ..refs import Ref
from ..service import Store
from ..storage import LocalBlobStore
from .source import Snapshot
from .stage import Finding, MakeProgress, Report, Stage, run_all, source_failure


class Verify(Stage):
    def __init__(
        self,
        snapshot: Snapshot,
        source: LocalBlobStore,
        store: Store,
        report: Report,
        progress: MakeProgress,
        *,
        heal: bool,
        jobs: int,
    ) -> None:
        super().__init__(snapshot, source, store, report, progress)
        self.heal = heal
        self.jobs = jobs
        self.wanted = snapshot.wanted(f.what for f in report.failed)

    def _differ(self, kind: str, what: str, detail: str) -> None:
        self.report.differences.append(Finding(kind, what, detail))

    async def run(self) -> None:
        target = {r.ref: r for r in await self.store.index.rows()}
        self.report.target_only = len(target.keys() - self.snapshot.rows.keys())
        # An object the target lacks may be one the source cannot give (--verify-only has not read it).
        for ref, row in list(self.wanted.items()):
            if ref not in target and (failure := await source_failure(self.source, row)) is not None:
                self.report.failed.append(failure)
                del self.wanted[ref]
        for ref, row in self.wanted.items():
            found = target.get(ref)
            if found is None:
                self._differ("object", ref, "no row in the target")
            elif changes := _changes(found, row):
                self._differ("object", ref, changes)
        await self._bytes([row for ref, row in self.wanted.items() if ref in target])
        await self._grants()
        await self._sessions()
        await self._variants()

    async def _bytes(self, rows: list[ObjectRow]) -> None:
        progress = self.progress("verify", len(rows), sum(r.bytes for r in rows))
        pending = iter(rows)

        async def read() -> None:
            for row in pending:
                ref = Ref.parse(row.ref)
                try:
                    await self.store.blobs.read(ref, row.bytes)
                except (Corrupt, Missing) as e:
                    if not await self._healed(ref, row.bytes):
                        detail = "do not match the ref" if isinstance(e, Corrupt) else "are missing"
                        self._differ("bytes", row.ref, f"the target's bytes {detail}")
                        progress.advance(1, row.bytes)
                        continue
                self.report.verified += 1
                self.report.verified_bytes += row.bytes
                progress.advance(1, row.bytes)

        try:
            await run_all(read() for _ in range(self.jobs))
        finally:
            progress.finish()

    async def _healed(self, ref: Ref, size: int) -> bool:
        if not self.heal:
            return False
        try:
            await self.store.blobs.put(ref, await self.source.read(ref, size))
            await self.store.blobs.read(ref, size)
        except (Corrupt, Missing):
            return False
        self.report.healed += 1
        return True

    async def _grants(self) -> None:
        # Each tenant sees exactly the objects it saw, by the names it gave them.
        refs = list(self.wanted)
        tenants = self.snapshot.tenants() | {t.name for t in self.store.config.tenants} | {""}
        for tenant in sorted(tenants):
            should = {
                ref: name for ref in refs for t, name in self.snapshot.grants.get(ref, ()) if t == tenant
            }
            seen = await self.store.index.get_many(refs, tenant) if refs else {}
            for ref, name in should.items():
                if ref not in seen:
                    self._differ("grant", ref, f"tenant {tenant!r} does not see it in the target")
                elif seen[ref].name != name:
                    self._differ(
                        "grant", ref, f"tenant {tenant!r} sees it as {seen[ref].name!r}, not {name!r}"
                    )
            for ref in sorted(seen.keys() - should.keys()):
                self._differ("grant", ref, f"tenant {tenant!r} sees it in the target, not in the source")

    async def _sessions(self) -> None:
        for s in self.snapshot.sessions:
            what = f"{s.tenant}/{s.id}"
            found = await self.store.index.get_session(s.key)
            if found is None:
                self._differ("session", what, "not in the target")
                continue
            if (found.route, found.created_at) != (s.route, s.created_at):
                self._differ(
                    "session",
                    what,
                    f"route {found.route!r} created at {found.created_at!r} in the target, "
                    f"{s.route!r} created at {s.created_at!r} in the source",
                )
            if found.ttl != s.ttl:
                self._differ(
                    "session", what, f"a ttl of {found.ttl!r} in the target, {s.ttl!r} in the source"
                )
            holds = tuple(h.ref for h in s.holds if h.ref in self.wanted)
            if found.holds != holds:
                self._differ("holds", what, _holds_change(found.holds, holds))

    async def _variants(self) -> None:
        for link in self.snapshot.variants:
            if {link.source, link.variant} <= self.wanted.keys():
                link_now = await self.store.index.variant(link.source, link.spec)
                found = link_now.row.ref if link_now else None
                if found != link.variant:
                    what = f"{link.source} {link.spec}"
                    self._differ("variant", what, f"links {found}, not {link.variant}")


def _holds_change(target: tuple[str, ...], source: tuple[str, ...]) -> str:
    lacks = [r for r in source if r not in target]
    extra = [r for r in target if r not in source]
    parts = [f"the target lacks {', '.join(lacks)}"] if lacks else []
    parts += [f"the target also holds {', '.join(extra)}"] if extra else []
    return "; ".join(parts) or "the target holds them in another order"


def _changes(target: ObjectRow, source: ObjectRow) -> str:
    return "; ".join(
        f"{name}: {getattr(target, name)!r} (source {getattr(source, name)!r})"
        for name in ObjectRow._fields
        if getattr(target, name) != getattr(source, name)
    )
