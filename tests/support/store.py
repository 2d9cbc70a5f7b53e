"""Working on a Store directly in tests."""

from __future__ import annotations

import os

from attachstore.service import Store


async def age(store: Store, seconds: float) -> None:
    """Make every lease (and every file) `seconds` older."""
    async with store.index.write() as db:
        await db.execute("UPDATE objects SET lease_at = lease_at - ?", (seconds,))
    for f in [*store.local.walk_objects(), *store.local.walk_staging()]:
        os.utime(f.path, (f.mtime - seconds, f.mtime - seconds))
