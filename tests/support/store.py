"""Working on a Store directly in tests."""

from __future__ import annotations

import os
import time

from attachstore.index import ObjectRow
from attachstore.refs import Ref
from attachstore.service import Store


async def age(store: Store, seconds: float) -> None:
    """Make every lease (and every file) `seconds` older."""
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET lease_at = lease_at - ?", (seconds,))
    for f in [*store.local.walk_objects(), *store.local.walk_staging()]:
        os.utime(f.path, (f.mtime - seconds, f.mtime - seconds))


async def plant(store: Store, data: bytes, media_type: str, width: int, height: int, tenant: str = "") -> Ref:
    """Publish `data` without passing the gate: an object an older, looser gate admitted (SPEC section 4:
    reads never re-apply admission limits)."""
    ref = Ref.of(store.config.hash, data)
    await store.blobs.put(ref, data)
    now = time.time()

    async def nothing_to_check() -> None:
        return None

    row = ObjectRow(str(ref), media_type, len(data), width, height, 1, None, now, now)
    await store.index.publish([row], nothing_to_check, None, tenant)
    return ref
