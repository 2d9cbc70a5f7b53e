"""What the audit's --repair does to a confirmed finding, each step as the daemon itself takes it."""

from __future__ import annotations

import time
from pathlib import Path

from ..config import Limits
from ..errors import Rejected
from ..index import ObjectRow
from ..refs import Ref
from ..service import Store

# Re-indexing a stray file must not re-apply admission limits: reads never do.
_NO_LIMITS = Limits(
    max_image_bytes=1 << 40,
    max_side=1 << 30,
    max_pixels=1 << 60,
    max_frames=1 << 30,
    max_animation_pixels=1 << 62,
    max_batch_images=1,
    max_batch_bytes=1 << 40,
)


async def quarantine(store: Store, ref: Ref) -> str:
    # As a read does: moved and marked under the ref's lock, so no heal's publish comes in between.
    found = await store.reads.quarantine(ref)
    if found is None:
        return "collected meanwhile"
    if found == "intact":
        return "healed meanwhile; left in place"
    return "quarantined" if found == "quarantined" else "marked missing"


async def set_aside(store: Store, path: Path) -> str:
    return await store.blobs.set_aside(str(path))


async def reindex(store: Store, ref: Ref, data: bytes, name: str | None) -> str:
    try:
        found = await store.pool.inspect(data, None, _NO_LIMITS, ref.algorithm)
    except Rejected as e:
        return f"not re-indexed: {e.code}: {e.message}"
    now = time.time()
    existing = await store.index.get(str(ref))
    row = ObjectRow(
        str(ref),
        found.media_type,
        len(data),
        found.width,
        found.height,
        found.frames,
        name,
        existing.created_at if existing else now,
        now,
        keyed_check=(
            store.checker.of(str(ref), len(data), found.media_type, data)
            if ref.algorithm == "sha256"
            else None
        ),
    )

    async def still_there() -> None:
        if await store.blobs.stat(ref) is None:
            raise FileNotFoundError(str(ref))

    # Durable before published, as for an admission: a stray's name may never have been made durable
    # (its writer was killed between its link and its directory fsyncs); put verifies the file and
    # fsyncs its directory chain (and writes it again from `data` if it changed meanwhile).
    await store.blobs.put(ref, data)
    try:
        await store.index.publish([row], still_there)
    except FileNotFoundError:
        return "gone meanwhile"
    return "re-indexed"
