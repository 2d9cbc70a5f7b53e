"""The index's operations, written once for both backends: what each transaction locks, reads, checks and
writes. A backend (sqlite.py, postgres.py) opens the connections, runs the transactions and speaks its dialect
(`Reads`, `Tx`). Every transaction locks what it reads and changes first, in the order session row, refs
(sorted), object rows; docs/design.md, "The locks", says why each lock is needed."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from . import listings, lookups, policy, sessions, sweep, totals
from .dialect import CallbackFailed, Reads, Tx, call, guard
from .listings import HeldRow, HoldAt, SessionAt, SessionEntry
from .objects import OBJECT_COLUMNS, PUBLISHED, UPSERT_OBJECT, object_row, object_values, renew, rows_of
from .policy import Decide
from .rows import COLUMNS, Hold, Link, LinkRow, NodeRow, ObjectRow, PolicyRecord, SessionKey, SessionRow

T = TypeVar("T")


class Index(ABC):
    """Every method that writes is one transaction; those that only read run on `Reads`, outside any
    transaction."""

    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    @abstractmethod
    async def _transaction(self, work: Callable[[Tx], Awaitable[T]]) -> T: ...

    async def _write(self, work: Callable[[Tx], Awaitable[T]]) -> T:
        try:
            return await self._transaction(work)
        except CallbackFailed as e:
            raise e.error from None

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    def sweeping(self) -> AbstractAsyncContextManager[None]: ...

    async def ping(self) -> None:
        await self._reads.fetch("SELECT 1")

    async def ready(self) -> None:
        await self.ping()

    # -- objects ---------------------------------------------------------------------------------------------

    async def get(self, ref: str, tenant: str | None = None) -> ObjectRow | None:
        found = await rows_of(self._reads, [ref], tenant)
        return found[0] if found else None

    async def get_many(self, refs: Sequence[str], tenant: str | None = None) -> dict[str, ObjectRow]:
        return {r.ref: r for r in await rows_of(self._reads, refs, tenant)}

    async def renew(self, refs: Iterable[str], now: float | None = None) -> dict[str, ObjectRow]:
        """Renewing before touching the file keeps a concurrent GC from collecting an object that an admission
        is about to dedup onto."""
        at = time.time() if now is None else now
        wanted = list(dict.fromkeys(refs))
        if not wanted:
            return {}

        async def work(tx: Tx) -> dict[str, ObjectRow]:
            await tx.lock_refs(wanted)
            found = {r.ref: r for r in await renew(tx, wanted, at)}
            return {ref: found[ref] for ref in wanted if ref in found}

        return await self._write(work)

    async def publish(
        self,
        rows: Sequence[ObjectRow],
        check: Callable[[], Awaitable[object]],
        hold: Hold | None = None,
        tenant: str | None = None,
        source: str | None = None,
    ) -> None:
        """`check` and the hold's guard run under the locks first; if one raises, nothing is committed.
        `source`: the entry the bytes came through, recorded on the tenant's grant if it has none."""
        ordered = sorted(rows, key=lambda r: r.ref)  # row locks in ref order; equal refs keep their order

        async def work(tx: Tx) -> None:
            if hold is not None:
                guard(hold.guard, await sessions.require(tx, hold.key))
            await tx.lock_refs(r.ref for r in rows)
            await call(check)
            if ordered:
                await tx.executemany(UPSERT_OBJECT, [object_values(r) for r in ordered])
            if tenant is not None and ordered:
                await tx.executemany(
                    """INSERT INTO grants (tenant, ref, name, source) VALUES ($1, $2, $3, $4)
                    ON CONFLICT (tenant, ref) DO UPDATE SET name = coalesce(grants.name, excluded.name),
                    source = coalesce(grants.source, excluded.source)""",
                    [(tenant, r.ref, r.name, source) for r in ordered],
                )
            if hold is not None:
                at = rows[0].lease_at if rows else time.time()
                await sessions.insert_holds(tx, hold.key, [r.ref for r in rows], at)
                await sessions.renew_session(tx, hold.key, at)  # the admission is a use of the session

        await self._write(work)

    async def record_check(self, ref: str, check: str) -> None:
        await self._write(
            lambda tx: tx.execute("UPDATE objects SET keyed_check = $2 WHERE ref = $1", ref, check)
        )

    async def discard_unpublished(
        self, refs: Iterable[str], remove: Callable[[str], Awaitable[object]]
    ) -> None:
        wanted = list(refs)
        if not wanted:
            return

        async def work(tx: Tx) -> None:
            await tx.lock_refs(wanted)
            published = {r.ref for r in await rows_of(tx, wanted, None)}
            for ref in wanted:
                if ref not in published:
                    await call(remove, ref)

        await self._write(work)

    async def published_now(self, ref: str) -> bool:
        """Asked under the ref's lock: a publishing transaction has either committed or not begun (the audit's
        confirmation that a file is stray)."""

        async def work(tx: Tx) -> bool:
            await tx.lock_refs([ref])
            return bool(await tx.fetch(PUBLISHED, ref))

        return await self._write(work)

    async def settle(
        self, ref: str, scope: str | None, decide: Callable[[ObjectRow], Awaitable[tuple[str, T]]]
    ) -> T | None:
        """`decide(row)` runs under the ref's lock, where nobody publishes nor collects it; not called when
        `scope` sees no row (gc collected it meanwhile)."""

        async def work(tx: Tx) -> T | None:
            await tx.lock_refs([ref])
            found = await rows_of(tx, [ref], scope)
            if not found:
                return None
            row = found[0]
            state, answer = await call(decide, row)
            if state != row.state:
                await tx.execute("UPDATE objects SET state = $1 WHERE ref = $2", state, ref)
            return answer

        return await self._write(work)

    async def confirm_missing(self, ref: str, gone: Callable[[], Awaitable[bool]], mark: bool) -> str | None:
        """None unless the row is still there and `gone()` confirms its object is absent; with `mark`, an 'ok'
        row becomes 'missing'."""

        async def decide(row: ObjectRow) -> tuple[str, str | None]:
            if not await gone():
                return row.state, None
            return ("missing" if mark and row.state == "ok" else row.state), row.state

        return await self.settle(ref, None, decide)

    # -- garbage collection ----------------------------------------------------------------------------------

    async def collectible(self, cutoff: float) -> list[ObjectRow]:
        """A session that expired before `cutoff` holds nothing here: gc releases it before it sweeps."""
        return await sweep.collectible(self._reads, cutoff)

    async def held_and_recent(self, cutoff: float, now: float | None = None) -> tuple[int, int]:
        """Held by a session live at `now` (or linked as a variant); not held, but within the grace (an
        expired session's objects count from its expiry)."""
        return await sweep.held_and_recent(self._reads, cutoff, time.time() if now is None else now)

    async def refs(self) -> set[str]:
        return {r[0] for r in await self._reads.fetch("SELECT ref FROM objects")}

    async def rows(self) -> list[ObjectRow]:
        return [object_row(r) for r in await self._reads.fetch(f"SELECT {COLUMNS} FROM objects ORDER BY ref")]

    async def collect(
        self, refs: Sequence[str], cutoff: float, remove: Callable[[str], Awaitable[object]]
    ) -> list[tuple[str, int]]:
        """Each candidate is re-checked under the locks before `remove(ref)`; its variants go with it unless
        something else keeps them."""
        if not refs:
            return []
        candidates = list(refs)
        return await self._write(lambda tx: sweep.collect(tx, candidates, cutoff, remove))

    # -- variants --------------------------------------------------------------------------------------------

    async def variant(self, source: str, spec: str) -> Link | None:
        """The link as recorded: the caller verifies its check (refs.Checker.link_holds) before following
        it."""
        found = await self._reads.fetch(
            f"""SELECT {OBJECT_COLUMNS}, variants.link_check FROM variants
            JOIN objects ON objects.ref = variants.variant
            WHERE variants.source = $1 AND variants.spec = $2""",
            source,
            spec,
        )
        if not found:
            return None
        *row, check = found[0]
        return Link(source, spec, ObjectRow(*row), check)

    async def links(self) -> list[LinkRow]:
        found = await self._reads.fetch(
            "SELECT source, spec, variant, link_check FROM variants ORDER BY source, spec"
        )
        return [LinkRow(*r) for r in found]

    async def unlink(self, link: LinkRow) -> bool:
        """Only if it still is `link`. The variant stays, for gc to collect when nothing else keeps it."""

        async def work(tx: Tx) -> bool:
            await tx.lock_refs([link.source])
            now = await tx.fetch(
                "SELECT variant, link_check FROM variants WHERE source = $1 AND spec = $2",
                link.source,
                link.spec,
            )
            if not now or (now[0][0], now[0][1]) != (link.variant, link.check):
                return False
            await tx.execute("DELETE FROM variants WHERE source = $1 AND spec = $2", link.source, link.spec)
            return True

        return await self._write(work)

    async def publish_variant(
        self,
        row: ObjectRow,
        source: str,
        spec: str,
        check: Callable[[], Awaitable[object]],
        link_check: str | None,
    ) -> bool:
        """False (nothing committed) when the source was collected meanwhile. A link without a check is
        derived again when next wanted."""

        async def work(tx: Tx) -> bool:
            await tx.lock_refs([source, row.ref])
            if not await tx.fetch(PUBLISHED, source):
                return False
            await call(check)
            await tx.execute(UPSERT_OBJECT, *object_values(row))
            await tx.execute(
                """INSERT INTO variants (source, spec, variant, created_at, link_check)
                VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (source, spec) DO UPDATE SET
                    variant = excluded.variant, link_check = excluded.link_check""",
                source,
                spec,
                row.ref,
                row.lease_at,
                link_check,
            )
            return True

        return await self._write(work)

    # -- figures for /metrics --------------------------------------------------------------------------------

    async def stats(self) -> tuple[int, int]:
        [found] = await self._reads.fetch(
            "SELECT count(*), CAST(coalesce(sum(bytes), 0) AS bigint) FROM objects"
        )
        return int(found[0]), int(found[1])

    async def record_run(self, command: str, figures: Mapping[str, float], now: float | None = None) -> None:
        at = time.time() if now is None else now

        async def work(tx: Tx) -> None:
            await tx.execute(
                """INSERT INTO runs (command, finished_at, figures) VALUES ($1, $2, $3)
                ON CONFLICT (command) DO UPDATE SET finished_at = excluded.finished_at,
                figures = excluded.figures""",
                command,
                at,
                json.dumps(figures),
            )

        await self._write(work)

    async def runs(self) -> dict[str, tuple[float, dict[str, float]]]:
        found = await self._reads.fetch("SELECT command, finished_at, figures FROM runs")
        return {str(r[0]): (float(r[1]), json.loads(r[2])) for r in found}

    # -- the store's policy and its nodes --------------------------------------------------------------------

    async def policy(self) -> PolicyRecord | None:
        return await policy.record(self._reads)

    async def nodes(self) -> list[NodeRow]:
        return await policy.nodes(self._reads)

    async def join(self, node: NodeRow, decide: Decide) -> PolicyRecord | None:
        return await self._write(lambda tx: policy.join(tx, node, decide))

    async def heartbeat(self, node: NodeRow, now: float) -> PolicyRecord | None:
        return await self._write(lambda tx: policy.heartbeat(tx, node, now))

    async def stopping(self, node: str, now: float) -> None:
        await self._write(lambda tx: tx.execute("UPDATE nodes SET seen_at = $1 WHERE node = $2", -now, node))

    async def leave(self, node: str) -> None:
        await self._write(lambda tx: tx.execute("DELETE FROM nodes WHERE node = $1", node))

    # -- sessions and holds ----------------------------------------------------------------------------------

    async def get_session(self, key: SessionKey) -> SessionRow | None:
        return await sessions.read(self._reads, key)

    async def create_session(
        self, key: SessionKey, route: str | None, now: float, ttl: int | None = None
    ) -> tuple[SessionRow, bool]:
        return await self._write(lambda tx: sessions.create(tx, key, route, now, ttl))

    async def keep_lifetime(self, key: SessionKey, ttl: int | None, used_at: float) -> None:
        """A migration's copy of a session's lifetime and last use (never moved back)."""
        await self._write(lambda tx: sessions.keep_lifetime(tx, key, ttl, used_at))

    async def touch_session(self, key: SessionKey, now: float, since: float) -> bool:
        """Renew the session unless it was used since `since`: a render's one write, now and then."""
        return await self._write(lambda tx: sessions.touch(tx, key, now, since))

    async def set_route(
        self, key: SessionKey, route: str | None, guard: Callable[[SessionRow], object]
    ) -> SessionRow:
        return await self._write(lambda tx: sessions.set_route(tx, key, route, guard))

    async def fork(self, source: SessionKey, target: SessionKey, now: float) -> SessionRow:
        return await self._write(lambda tx: sessions.fork(tx, source, target, now))

    async def add_holds(self, hold: Hold, refs: Sequence[str], now: float) -> SessionRow:
        """All of them or, if one has no row, none (ATTACHMENT_NOT_FOUND)."""
        return await self._write(lambda tx: sessions.add_holds(tx, hold, refs, now))

    async def delete_session(self, key: SessionKey, now: float) -> int:
        return await self._write(lambda tx: sessions.delete(tx, key, now))

    async def expired_sessions(self, now: float) -> list[SessionRow]:
        """Every tenant's, without their holds."""
        return await sessions.expired(self._reads, now)

    async def release_expired(self, key: SessionKey, now: float) -> int | None:
        """The holds released, or None if the session is no longer expired (renewed meanwhile) or gone."""
        return await self._write(lambda tx: sessions.release_expired(tx, key, now))

    # -- listings and totals (docs/api.md, "Listings and totals"), the operator page's lookups (api/ui) ---

    async def sessions_page(
        self,
        tenant: str,
        *,
        prefix: str,
        expired: bool | None,
        now: float,
        after: SessionAt | None,
        limit: int,
    ) -> list[SessionEntry]:
        return await listings.sessions_page(
            self._reads, tenant, prefix=prefix, expired=expired, now=now, after=after, limit=limit
        )

    async def holds_page(
        self, key: SessionKey, scoped: bool, *, after: HoldAt | None, limit: int
    ) -> list[HeldRow] | None:
        return await listings.holds_page(self._reads, key, scoped, after=after, limit=limit)

    async def totals(self, scope: str) -> Mapping[str, int]:
        """The figures the triggers keep for a tenant, or for the store (totals.STORE)."""
        return await totals.read(self._reads, scope)

    async def expired_count(self, tenant: str | None, now: float) -> int:
        """How many of the tenant's sessions (every tenant's: None) have expired at `now`."""
        return await listings.expired_count(self._reads, tenant, now)

    async def background_reads(self) -> Reads:
        """Where a long read for a figure goes (PostgreSQL: the pool, as every read)."""
        return self._reads

    async def collectible_count(self, cutoff: float) -> tuple[int, int]:
        """How many objects, of how many bytes, gc would consider at `cutoff` (GET /v1/stats, in the back)."""
        return await listings.collectible_count(await self.background_reads(), cutoff)

    async def holders(self, ref: str, tenant: str, after: str = "", limit: int = 100) -> list[str]:
        """Through holds_ref: the ids of `tenant`'s sessions that hold `ref`."""
        return await lookups.holders(self._reads, ref, tenant, after, limit)

    async def quarantined(self, tenant: str | None, after: str = "", limit: int = 100) -> list[ObjectRow]:
        return await lookups.quarantined(self._reads, tenant, after, limit)
