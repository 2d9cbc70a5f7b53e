"""The index's operations, written once for both backends: what each transaction locks, reads, checks and
writes. A backend (sqlite.py, postgres.py) opens the connections, runs the transactions (`_transaction`) and
speaks its dialect (`Reads`, `Tx`); everything that follows holds for both.

A row is the publication of an object: the service commits it only after the object's bytes are durable, and
checks, inside the same transaction, that the file is still there. Anything that removes an object file does
so under the lock of its ref, and only when no row publishes it (or, in `collect`, together with its row).

The locks. Each transaction first locks what it is about to read and change, and holds it until it ends:

- Every transaction that publishes, renews, collects, discards, confirms (`published_now`, `confirm_missing`),
  settles a read's finding (`settle`) or links variants of a ref takes the ref's lock (`Tx.lock_refs`,
  sorted), which covers refs that have no row yet. So:
  1. an admission's renewal and a GC sweep of the same ref happen one after the other; a sweep that comes
     second sees the fresh lease and skips the object, an admission that comes second finds no row and
     writes the bytes again;
  2. a sweep re-checks each candidate (no hold, not a linked variant, lease older than the cutoff), removes
     the file and deletes the row without anyone publishing, holding or linking that ref in between;
  3. `publish` runs its check that the files are still there, and `discard_unpublished` removes a file only
     where no row publishes it, each under the locks of its refs: one of them sees the other's outcome;
  4. a read that found a file missing or damaged settles it (`settle`: looks again, moves it aside, marks the
     row) between publishes and sweeps: it finds no row once gc has collected one, and its mark never lands
     after the publish of an admission that healed the file since.
- Every transaction that changes a session or its holds (create, route, fork, holds, delete, and a publish
  that holds) locks the session row before it reads the holds and runs the guard; the holds are read in a
  later statement, so they include whatever the previous lock holder committed.
- Adding holds (`add_holds`, `publish` with a hold) also takes the locks of the refs held, so a hold never
  slips in between a sweep's re-check and its delete. Fork and delete_session need no ref locks: the refs they
  touch are held by a session they have locked, and a sweep leaves held refs alone.
- A node that joins the store locks the policy record (`join`): two daemons starting together decide one
  after the other whether their policies differ. It takes no other lock.
- Lock order: session row, then refs (sorted), then object rows (sorted by ref). `collect` may add the locks
  of variants linked between its first look and its locks, out of order, but before it removes anything.

SQLite runs every write transaction behind one write lock, which already excludes every other writer: there
the locks cost nothing (`Tx.exclusive`). PostgreSQL runs many at once, and takes each (postgres.py tells
how, and how a deadlock that happens anyway is retried: a transaction may run more than once, callbacks
included; they re-check under the locks, and removing a removed file is a no-op).
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from . import policy, sessions, sweep
from .dialect import CallbackFailed, Reads, Tx, call, guard
from .objects import OBJECT_COLUMNS, PUBLISHED, UPSERT_OBJECT, object_row, object_values, renew, rows_of
from .policy import Decide
from .rows import COLUMNS, Hold, Link, LinkRow, NodeRow, ObjectRow, PolicyRecord, SessionKey, SessionRow

T = TypeVar("T")


class Index(ABC):
    """The index's interface and semantics, on a backend's reads and transactions: every method that writes
    is one transaction; those that only read run their statements on `Reads`, outside any transaction."""

    def __init__(self, reads: Reads) -> None:
        self._reads = reads

    @abstractmethod
    async def _transaction(self, work: Callable[[Tx], Awaitable[T]]) -> T:
        """`work` in one transaction, committed if it returns; the driver's failures leave as StorageFull or
        StorageUnavailable."""

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
        """The index answers and can take an admission's writes (for /readyz); StorageUnavailable if not."""
        await self.ping()

    # -- objects ---------------------------------------------------------------------------------------------

    async def get(self, ref: str, tenant: str | None = None) -> ObjectRow | None:
        """The row, if `tenant` may see it (None: the operator, who sees everything)."""
        found = await rows_of(self._reads, [ref], tenant)
        return found[0] if found else None

    async def get_many(self, refs: Sequence[str], tenant: str | None = None) -> dict[str, ObjectRow]:
        """The rows of those of `refs` that `tenant` may see."""
        return {r.ref: r for r in await rows_of(self._reads, refs, tenant)}

    async def renew(self, refs: Iterable[str], now: float | None = None) -> dict[str, ObjectRow]:
        """Renew the lease of every listed object that has a row; return those rows (in the order of
        `refs`). Renewing before touching the file keeps a concurrent GC from collecting an object that an
        admission is about to dedup onto."""
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
    ) -> None:
        """Insert or refresh `rows` in one transaction, and add them to the session of `hold` if given.
        `check` and the hold's guard run under the locks first; if one raises, nothing is committed."""
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
                    """INSERT INTO grants (tenant, ref, name) VALUES ($1, $2, $3)
                    ON CONFLICT (tenant, ref) DO UPDATE SET name = coalesce(grants.name, excluded.name)""",
                    [(tenant, r.ref, r.name) for r in ordered],
                )
            if hold is not None:
                await sessions.insert_holds(
                    tx, hold.key, [r.ref for r in rows], rows[0].lease_at if rows else time.time()
                )

        await self._write(work)

    async def record_check(self, ref: str, check: str) -> None:
        """Record the keyed check of an object's bytes, just verified by their address (a row older than
        checks, or one made with another key)."""
        await self._write(
            lambda tx: tx.execute("UPDATE objects SET keyed_check = $2 WHERE ref = $1", ref, check)
        )

    async def discard_unpublished(
        self, refs: Iterable[str], remove: Callable[[str], Awaitable[object]]
    ) -> None:
        """Under the refs' locks, call `remove(ref)` for each ref that no row publishes."""
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
        """Whether a row publishes `ref`, asked under its lock: a publishing transaction has either committed
        or not begun (the audit's confirmation that a file is stray)."""

        async def work(tx: Tx) -> bool:
            await tx.lock_refs([ref])
            return bool(await tx.fetch(PUBLISHED, ref))

        return await self._write(work)

    async def settle(
        self, ref: str, scope: str | None, decide: Callable[[ObjectRow], Awaitable[tuple[str, T]]]
    ) -> T | None:
        """What a read (or the audit) found wrong with the file of `ref`, settled under the ref's lock:
        `decide(row)` gets the row as `scope` may see it now, looks at the file again (moves it aside, say)
        and returns the state the row is to have and what to answer. None, without calling `decide`, when
        `scope` sees no row: gc collected it meanwhile (it removes the file, then the row, under this lock).

        Under the lock nobody publishes nor collects the ref (docs/design.md, "Verified reads")."""

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
        """Under the ref's lock: the row's state if the row is still there and `gone()` confirms its object
        is absent, else None. With `mark`, a row in state 'ok' becomes 'missing' (and 'ok' is returned)."""

        async def decide(row: ObjectRow) -> tuple[str, str | None]:
            if not await gone():
                return row.state, None
            return ("missing" if mark and row.state == "ok" else row.state), row.state

        return await self.settle(ref, None, decide)

    # -- garbage collection ----------------------------------------------------------------------------------

    async def collectible(self, cutoff: float) -> list[ObjectRow]:
        """Rows with no hold whose lease is older than `cutoff`: the GC's candidates, to be re-checked."""
        return await sweep.collectible(self._reads, cutoff)

    async def held_and_recent(self, cutoff: float) -> tuple[int, int]:
        """What GC keeps whatever the roots say: how many objects are held (by a session, or as a variant a
        source links to), and how many others are within the grace period (lease at `cutoff` or later)."""
        return await sweep.held_and_recent(self._reads, cutoff)

    async def refs(self) -> set[str]:
        return {r[0] for r in await self._reads.fetch("SELECT ref FROM objects")}

    async def rows(self) -> list[ObjectRow]:
        return [object_row(r) for r in await self._reads.fetch(f"SELECT {COLUMNS} FROM objects ORDER BY ref")]

    async def collect(
        self, refs: Sequence[str], cutoff: float, remove: Callable[[str], Awaitable[object]]
    ) -> list[tuple[str, int]]:
        """Under the locks of the candidates and of their variants, re-check each candidate (still no hold,
        not a live variant, lease still older than `cutoff`), call `remove(ref)` (which removes the file and
        makes that durable), then delete its row. The variants derived from it go with it, unless something
        else keeps them (a hold, a grant from an admission of the same bytes, another source). Returns (ref,
        bytes) of every object collected, variants included."""
        if not refs:
            return []
        candidates = list(refs)
        return await self._write(lambda tx: sweep.collect(tx, candidates, cutoff, remove))

    # -- variants --------------------------------------------------------------------------------------------

    async def variant(self, source: str, spec: str) -> Link | None:
        """The link from `source` with `spec`, with its variant's row, if there is one. The link is as the
        index records it: its check is for the caller to verify (refs.Checker.link_holds) before following
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
        """Remove the link from `link.source` with `link.spec` if it still is `link` (variant and check),
        under the source's lock; whether it was removed. The variant stays, for gc to collect when nothing
        else keeps it; the source's variant is derived again, and linked with a check, when next wanted."""

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
        """Publish a derived object and link it to its source with the link's keyed check (None: a link
        copied without one, derived again when next wanted), in one transaction; False (nothing committed)
        when the source is gone, collected meanwhile. `check` runs under the locks first."""

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
        """How many objects the index holds, and their bytes."""
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
        """The policy the store enforces, as the last daemon to start recorded it; None before any did."""
        return await policy.record(self._reads)

    async def nodes(self) -> list[NodeRow]:
        return await policy.nodes(self._reads)

    async def join(self, node: NodeRow, decide: Decide) -> PolicyRecord | None:
        """Add `node` under the record's lock, after `decide(record, other nodes)` (which may raise) said
        whether its policy replaces the record and which nodes are gone. Returns the record as it was."""
        return await self._write(lambda tx: policy.join(tx, node, decide))

    async def heartbeat(self, node: NodeRow, now: float) -> PolicyRecord | None:
        """`node` is alive at `now`; returns the record, which another node may have replaced."""
        return await self._write(lambda tx: policy.heartbeat(tx, node, now))

    async def stopping(self, node: str, now: float) -> None:
        """`node` stops from `now` on (it finishes its requests, then leaves): its `seen_at` becomes -now."""
        await self._write(lambda tx: tx.execute("UPDATE nodes SET seen_at = $1 WHERE node = $2", -now, node))

    async def leave(self, node: str) -> None:
        await self._write(lambda tx: tx.execute("DELETE FROM nodes WHERE node = $1", node))

    # -- sessions and holds ----------------------------------------------------------------------------------

    async def get_session(self, key: SessionKey) -> SessionRow | None:
        return await sessions.read(self._reads, key)

    async def create_session(self, key: SessionKey, route: str | None, now: float) -> tuple[SessionRow, bool]:
        """Create, or find the same session again. False when it already existed with this route."""
        return await self._write(lambda tx: sessions.create(tx, key, route, now))

    async def set_route(
        self, key: SessionKey, route: str | None, guard: Callable[[SessionRow], object]
    ) -> SessionRow:
        """Switch the route after `guard(session)` (run with the session locked) has not raised."""
        return await self._write(lambda tx: sessions.set_route(tx, key, route, guard))

    async def fork(self, source: SessionKey, target: SessionKey, now: float) -> SessionRow:
        """A new session with the source's route and a copy of all its holds, in one transaction."""
        return await self._write(lambda tx: sessions.fork(tx, source, target, now))

    async def add_holds(self, hold: Hold, refs: Sequence[str], now: float) -> SessionRow:
        """Hold existing objects: all of them or, if one has no row, none (ATTACHMENT_NOT_FOUND)."""
        return await self._write(lambda tx: sessions.add_holds(tx, hold, refs, now))

    async def delete_session(self, key: SessionKey, now: float) -> int:
        """Release every hold of the session, then forget it. Returns how many holds were released."""
        return await self._write(lambda tx: sessions.delete(tx, key, now))
