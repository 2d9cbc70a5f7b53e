"""Release: a stripped transcript's session dropped, so that gc may collect its images once their grace
period has passed without a hold. Refused while the transcript still holds placeholders."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..index import SessionKey
from ..service import Store
from .reports import TranscriptError
from .restore import placeholders_in


async def release(store: Store, key: SessionKey, path: Path | None, *, force: bool = False) -> int:
    if path is not None and not force and await asyncio.to_thread(path.exists):
        count = await placeholders_in(path)
        if count:
            raise TranscriptError(
                f"{path} still holds {count} placeholders: without its session gc would collect their images",
                code="TRANSCRIPT_STRIPPED",
                hint="restore it first (attachstore transcript restore --in-place FILE), or pass --force",
            )
    return await store.sessions.delete(key)
