"""GET /v1/stats: the store's figures as a tenant (or, open, the operator) may see them. Each comes from
where it costs least (docs/operations.md, "Totals"): the totals the index's triggers keep, a range of an
index, the last maintenance runs, the file system; what gc would collect now is counted in the background
and served with its age."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import Config
from ..index import Index
from ..index.totals import STORE

REFRESH_SECONDS = 300.0  # what gc would collect is counted again when a request finds it older than this


@dataclass(frozen=True, slots=True)
class Counted:
    objects: int
    bytes: int
    at: float  # when it was counted


@dataclass(frozen=True, slots=True)
class Run:
    finished_at: float
    figures: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Stats:
    scope: str | None  # the tenant; None: the whole store (the operator, or no tokens)
    objects: int
    bytes: int
    saved_bytes: int  # what holding each object once saves over a copy per hold
    held_bytes: int
    by_type: Mapping[str, tuple[int, int]]  # media type: (objects, bytes)
    quarantined: int
    missing: int
    sessions: int
    expired_sessions: int
    variants: int | None  # the store's alone
    previews: int | None
    collectible: Counted | None  # None until first counted
    runs: Mapping[str, Run] = field(default_factory=dict)  # "gc", "audit", ...: the last of each
    free_bytes: int | None = None  # of the data dir's file system; None where it is not the store's


class Figures:
    def __init__(self, config: Config, index: Index) -> None:
        self.config = config
        self.index = index
        self.collectible: Counted | None = None
        self._counting: asyncio.Task[None] | None = None

    async def stats(self, tenant: str, now: float | None = None) -> Stats:
        at = time.time() if now is None else now
        scope = None if self.config.is_open else tenant
        t = await self.index.totals(STORE if scope is None else scope)
        by_type = {
            k.removeprefix("objects:"): (v, t.get("bytes:" + k.removeprefix("objects:"), 0))
            for k, v in sorted(t.items())
            if k.startswith("objects:") and v
        }
        held, unique = t.get("held_bytes", 0), t.get("held_unique_bytes", 0)
        runs = {c: Run(f, figures) for c, (f, figures) in (await self.index.runs()).items()}
        self.refresh(at)
        return Stats(
            scope=scope,
            objects=t.get("objects", 0),
            bytes=t.get("bytes", 0),
            saved_bytes=held - unique,
            held_bytes=held,
            by_type=by_type,
            quarantined=t.get("state:quarantined", 0),
            missing=t.get("state:missing", 0),
            sessions=t.get("sessions", 0),
            expired_sessions=await self.index.expired_sessions(scope, at),
            variants=t.get("variants", 0) if scope is None else None,
            previews=t.get("previews", 0) if scope is None else None,
            collectible=self.collectible if scope is None else None,
            runs=runs if scope is None else {},
            free_bytes=self._free() if scope is None else None,
        )

    def _free(self) -> int | None:
        if self.config.storage.backend != "local":
            return None
        try:
            found = os.statvfs(self.config.data_dir)
        except OSError:
            return None
        return found.f_bavail * found.f_frsize

    def refresh(self, now: float) -> None:
        """Counts again in the background when the count is older than REFRESH_SECONDS (or missing)."""
        fresh = self.collectible is not None and now - self.collectible.at < REFRESH_SECONDS
        if fresh or (self._counting is not None and not self._counting.done()):
            return
        self._counting = asyncio.get_running_loop().create_task(self.count(now))

    async def count(self, now: float) -> None:
        cutoff = now - self.config.gc.grace_seconds
        objects, size = await self.index.collectible_count(cutoff)
        self.collectible = Counted(objects, size, now)

    async def close(self) -> None:
        if self._counting is not None:
            self._counting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._counting
