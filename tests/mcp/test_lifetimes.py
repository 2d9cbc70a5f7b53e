"""A store used by an MCP host over simulated weeks: every `attachstore mcp` process makes its own session
with the default idle lifetime ([mcp] session_ttl, 30 days); gc, run every day with the default grace (24 h),
releases the sessions that expired and collects what they held. The clock is moved, never waited for:
`time.time` answers the test's clock, and gc is given the same `now`."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from attachstore.config import Config
from attachstore.maintenance import gc
from attachstore.mcp import Local
from attachstore.service import Store
from tests.conftest import MakeConfig
from tests.mcp.conftest import ROUTES
from tests.support.images import png

DAY = 86400.0
START = 1_900_000_000.0  # 2030-03-17: any fixed moment


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = START
        monkeypatch.setattr(time, "time", lambda: self.now)

    def days(self, n: float) -> None:
        self.now += n * DAY


class Host:
    """An MCP host: each `process()` is an `attachstore mcp` started for one conversation, with its own
    `mcp-<16 hex>` session, as the command makes it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.images = 0

    def process(self, session: str | None = None) -> Local:
        name = session or f"mcp-{secrets.token_hex(8)}"
        return Local(self.config, name, "vision", ttl=self.config.mcp.session_ttl_seconds)

    async def read_images(self, backend: Local, count: int) -> list[str]:
        refs = []
        for _ in range(count):
            self.images += 1
            stored = await backend.admit(png(24, 16, seed=self.images), f"shot-{self.images}.png")
            assert not isinstance(stored, str), stored
            refs.append(stored.ref)
        return refs


async def _gc(store: Store, clock: Clock) -> gc.GcResult:
    return await gc.execute(store, await gc.plan(store, grace=DAY, now=clock.now))


async def test_a_store_filled_by_mcp_sessions_shrinks_once_they_expire(
    make_config: MakeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    config = make_config(routes=ROUTES)
    assert config.mcp.session_ttl_seconds == 30 * DAY
    host = Host(config)
    store = await Store.open(config, workers=1)
    live = host.process("mcp-live")  # one long conversation, used every few days
    live_refs: list[str] = []
    sizes: list[int] = []
    released = 0
    try:
        # Ten weeks: three conversations a week, each reading four images once; the long one reads one
        # image every third day. gc runs every day.
        for day in range(70):
            if day % 7 in (0, 2, 4):
                process = host.process()
                await host.read_images(process, 4)
                await process.close()
            if day % 3 == 0:
                live_refs += await host.read_images(live, 1)
            result = await _gc(store, clock)
            released += result.sessions_released
            sizes.append((await store.stats())[0])
            clock.days(1)

        conversations = 30
        assert host.images == conversations * 4 + len(live_refs)
        # The first 31 days (30 of lifetime, one of grace) nothing is collected: 14 conversations so far.
        assert sizes[31] == 14 * 4 + 11
        # Then what the expired conversations held goes, day by day, while new ones come: the store holds
        # the conversations of the last month, never more, besides the live session's images.
        conversation_images = [size - (day // 3 + 1) for day, size in enumerate(sizes)]
        assert max(conversation_images) == 14 * 4
        assert released == conversations - 13  # those of the last 30 days are still live
        assert sizes[-1] == 13 * 4 + len(live_refs)

        # The host stops making conversations; the long one goes on. Forty days on, every conversation's
        # session has expired and its grace passed: only what the live session holds is left.
        for _ in range(40):
            clock.days(1)
            if round((clock.now - START) / DAY) % 3 == 0:
                live_refs += await host.read_images(live, 1)
            await _gc(store, clock)
        assert (await store.stats())[0] == len(live_refs)
        for ref in live_refs:  # never collected: every one reads, verified
            row, _ = await store.read(ref)
            assert row.ref == ref
        session = await store.sessions.get(("", "mcp-live"))
        assert session.holds == tuple(live_refs)
        assert session.ttl == 30 * DAY

        # The long conversation ends too: 30 days after its last image its session expires, and a day after
        # that gc collects what it held.
        assert session.used_at == START + 108 * DAY
        clock.now = session.used_at + 30 * DAY  # it expires now, not before
        assert (await _gc(store, clock)).sessions_released == 0
        clock.days(1.01)
        result = await _gc(store, clock)
        assert (result.sessions_released, len(result.collected)) == (1, len(live_refs))
        assert await store.stats() == (0, 0)
    finally:
        await live.close()
        await store.close()
