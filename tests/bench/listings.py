"""The listings scenario: GET /v1/sessions (first page, a deep page, by prefix),
GET /v1/sessions/{id}/attachments and GET /v1/stats against a real daemon, on a large store (a million
objects by default) and on a small one (1,000), and against their floor: the same SQLite statements run by the
simplest code (sqlite3 in this process, no HTTP, no service). The index rows are written directly with SQL as
a version 11 store; opening it migrates to version 12, which counts the totals (that time is reported too)."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import re
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from attachstore.index import Hold, ObjectRow, SqliteIndex, listings, schema, totals
from attachstore.service.listings import encode_cursor

from .procs import Daemon

TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
HOLDS_PER_SESSION = 100
PAGE = 100


def build(data_dir: Path, objects: int) -> dict[str, Any]:
    """objects rows (each granted to the open tenant), one session per 100 objects, each holding 100 of
    them; half the sessions are `mcp-` ones, a quarter of those expired."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "index.sqlite3"
    started = time.perf_counter()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("BEGIN")
    for statement in (s for m in schema.MIGRATIONS[:11] for s in m):
        db.execute(statement)
    db.execute("PRAGMA user_version = 11")
    now = time.time()
    refs = ["sha256:" + hashlib.sha256(i.to_bytes(8, "big")).hexdigest() for i in range(objects)]
    db.executemany(
        """INSERT INTO objects (ref, media_type, bytes, width, height, frames, created_at, lease_at)
        VALUES (?, ?, ?, 640, 480, 1, ?, ?)""",
        ((r, TYPES[i % 4], 20_000 + i % 5000, now - i, now - i) for i, r in enumerate(refs)),
    )
    db.executemany("INSERT INTO grants (tenant, ref) VALUES ('', ?)", ((r,) for r in refs))
    sessions = max(2 * PAGE, objects // HOLDS_PER_SESSION)  # a full page, and more, in the small store too
    ids = [f"mcp-{i:016x}" if i % 2 else f"s-{i:08d}" for i in range(sessions)]
    db.executemany(
        """INSERT INTO sessions (tenant, id, route, created_at, used_at, expires_at)
        VALUES ('', ?, NULL, ?, ?, ?)""",
        (
            (id_, now - 3 * i, now - i, now - 1 if i % 8 == 1 else None if i % 2 == 0 else now + 86400)
            for i, id_ in enumerate(ids)
        ),
    )
    db.executemany(
        "INSERT INTO holds (tenant, session, ref, created_at) VALUES ('', ?, ?, ?)",
        (
            (id_, refs[(s * HOLDS_PER_SESSION + k) % objects], now - s - k / 1000)
            for s, id_ in enumerate(ids)
            for k in range(min(HOLDS_PER_SESSION, objects))
        ),
    )
    db.execute("COMMIT")
    db.close()
    written = time.perf_counter()

    async def migrate() -> None:  # version 12: the totals, counted from these rows
        index = await SqliteIndex.open(path)
        await index.close()

    asyncio.run(migrate())
    return {
        "objects": objects,
        "session_rows": sessions,
        "hold_rows": sessions * min(HOLDS_PER_SESSION, objects),
        "write_s": written - started,
        "migrate_to_12_s": time.perf_counter() - written,
        "ids": ids,
        "now": now,
    }


class _Direct:
    """The floor's `Reads`: the statements on a plain sqlite3 connection, in this thread."""

    hold_order = "rowid"

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    async def fetch(self, sql: str, *args: object) -> list[Any]:
        return self.db.execute(re.sub(r"\$(\d+)", r"?\1", sql), args).fetchall()

    def refs_in(self, column: str, refs: Sequence[str], first: int) -> Iterator[tuple[str, Sequence[object]]]:
        if refs:
            yield f"{column} IN ({', '.join(f'${first + i}' for i in range(len(refs)))})", list(refs)


def _requests(store: dict[str, Any]) -> dict[str, tuple[str, Callable[[_Direct], Any]]]:
    """name: (the request, the same statements run directly)."""
    ids, now = store["ids"], store["now"]
    middle = len(ids) // 2
    deep = (now - middle, ids[middle])  # where the page after the middle session starts
    cursor = encode_cursor("s", *deep)
    held = ids[middle]

    def page(**given: Any) -> Callable[[_Direct], Any]:
        return lambda db: listings.sessions_page(db, "", now=time.time(), limit=PAGE + 1, **given)

    async def stats(db: _Direct) -> Any:
        found = await totals.read(db, totals.STORE)
        return found, await listings.expired_count(db, None, time.time())

    return {
        "sessions": (f"/v1/sessions?limit={PAGE}", page()),
        "sessions_deep": (f"/v1/sessions?limit={PAGE}&cursor={cursor}", page(after=deep)),
        "sessions_prefix": (f"/v1/sessions?limit={PAGE}&prefix=mcp-", page(prefix="mcp-")),
        "attachments": (
            f"/v1/sessions/{held}/attachments?limit={PAGE}",
            lambda db: listings.holds_page(db, ("", held), False, limit=PAGE + 1),
        ),
        "stats": ("/v1/stats", stats),
    }


def _http(base: str, path: str, n: int) -> float:
    """The median of n sequential requests on one connection, in ms."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    laps = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            laps.append(time.perf_counter() - t0)
            if response.status != 200:
                raise RuntimeError(f"listings: {path} answered {response.status}: {body[:200]!r}")
    finally:
        conn.close()
    return statistics.median(laps) * 1000


def _direct(path: Path, run: Callable[[_Direct], Any], n: int) -> float:
    """The median of n runs of the statements, in ms: one event loop for all of them (making one per run
    would cost more than the statements)."""
    db = sqlite3.connect(path)
    reads = _Direct(db)

    async def laps() -> list[float]:
        found = []
        for _ in range(n):
            t0 = time.perf_counter()
            json.dumps(await run(reads), default=str)
            found.append(time.perf_counter() - t0)
        return found

    try:
        return statistics.median(asyncio.run(laps())) * 1000
    finally:
        db.close()


def _measure(work: Path, name: str, objects: int, n: int, rounds: int) -> dict[str, Any]:
    data_dir = work / f"store-listings-{name}"
    store = build(data_dir, objects)
    figures: dict[str, Any] = {
        k: store[k] for k in ("objects", "session_rows", "hold_rows", "write_s", "migrate_to_12_s")
    }
    with Daemon(data_dir, work / f"daemon-listings-{name}.log") as daemon:
        for request, (path, run) in _requests(store).items():
            _http(daemon.base, path, 2)  # warm: the daemon's first answer opens what it needs
            served = [_http(daemon.base, path, n) for _ in range(rounds)]
            floor = [_direct(data_dir / "index.sqlite3", run, n) for _ in range(rounds)]
            figures[request] = {"ms": statistics.median(served), "floor_ms": statistics.median(floor)}
    return figures


async def _publishing(path: Path, triggers: bool, publishes: int, batch: int = 4) -> float:
    """The median ms of a transaction that publishes `batch` new objects into a session, with their grants
    and holds, on a fresh index with or without the totals' triggers."""
    index = await SqliteIndex.open(path)
    if not triggers:
        await index.close()
        db = sqlite3.connect(path)
        for name in totals.TRIGGERS:
            db.execute(f"DROP TRIGGER {name}")
        db.commit()
        db.close()
        index = await SqliteIndex.open(path)

    async def nothing() -> None:
        pass

    try:
        await index.create_session(("", "s"), None, 1.0)
        hold = Hold(("", "s"), lambda s: None, everything=True)
        laps = []
        for i in range(publishes):
            rows = [
                ObjectRow(
                    f"sha256:{hashlib.sha256(f'{i}.{k}'.encode()).hexdigest()}",
                    "image/png",
                    1000,
                    1,
                    1,
                    1,
                    None,
                    1.0,
                    1.0,
                )
                for k in range(batch)
            ]
            t0 = time.perf_counter()
            await index.publish(rows, nothing, hold, "", "user")
            laps.append(time.perf_counter() - t0)
        return statistics.median(laps) * 1000
    finally:
        await index.close()


def trigger_cost(work: Path, quick: bool, rounds: int) -> dict[str, Any]:
    """What keeping the totals costs a write: the index's publish of 4 objects into a session (grants,
    holds), as the daemon's admission runs it, with the triggers and without (synchronous = FULL both)."""
    publishes = 20 if quick else 500
    with_, without = [], []
    for r in range(rounds):
        for triggers in (True, False) if r % 2 == 0 else (False, True):
            path = work / f"triggers-{r}-{triggers}" / "index.sqlite3"
            path.parent.mkdir(parents=True)
            (with_ if triggers else without).append(asyncio.run(_publishing(path, triggers, publishes)))
    return {
        "with_ms": statistics.median(with_),
        "without_ms": statistics.median(without),
        "ratio": statistics.median(with_) / statistics.median(without),
    }


def listings_scenario(work: Path, quick: bool, large: int | None = None) -> dict[str, Any]:
    small_n, large_n = (200, 2_000) if quick else (1_000, large or 1_000_000)
    n, rounds = (5, 1) if quick else (50, 3)
    small = _measure(work, "small", small_n, n, rounds)
    big = _measure(work, "large", large_n, n, rounds)
    requests = [k for k in big if isinstance(big[k], dict)]
    return {
        "workload": (
            f"sequential GETs on one connection ({n} per round, {rounds} rounds, medians), pages of {PAGE}, "
            f"against a daemon on a store of {large_n:,} objects in {big['session_rows']:,} sessions of "
            f"{HOLDS_PER_SESSION} holds, and on one of {small_n:,}"
        ),
        "baseline": "the same SQLite statements by plain sqlite3 in one process (the floor); the small store",
        "small": small,
        "large": big,
        "scale_ratio": {k: big[k]["ms"] / small[k]["ms"] for k in requests},
        "triggers": trigger_cost(work, quick, rounds),
        "floor_ratio": {k: big[k]["ms"] / big[k]["floor_ms"] for k in requests},
    }
