"""Previews for host UIs (docs/api.md): a small still rendition of a stored image, a variant (variants.py) on
a fixed ladder of sizes. The source is looked up under the caller's scope, the preview (which no tenant holds
a grant to) through it."""

from __future__ import annotations

from ..errors import InvalidRequest
from .model import ImageRef
from .reads import Reads
from .variants import Variants, VariantSpec

SIZES = (64, 128, 256, 512)
SIZES_HINT = "ask for size=64, 128, 256 or 512: the longer side of the preview, in pixels"
# A preview's bytes: two a pixel of its square, at least 16 KiB. A screenshot's PNG fits at every size
# (otherwise it becomes a JPEG); a photo's JPEG takes far less.
_MIN_BYTES = 16 * 1024


def preview_spec(size: int) -> VariantSpec:
    if size not in SIZES:
        raise InvalidRequest(f"size: {size} is not a preview size", hint=SIZES_HINT)
    return VariantSpec(size, size * size, max(_MIN_BYTES, 2 * size * size), preview=True)


class Previews:
    def __init__(self, reads: Reads, variants: Variants) -> None:
        self.reads = reads
        self.variants = variants

    async def current(self, text: str, size: int, tenant: str | None) -> str | None:
        """Without reading or deriving anything (a conditional GET): the source when it is its own preview,
        None when none is made yet."""
        spec = preview_spec(size)
        _, row = await self.reads.row(text, tenant)
        if not spec.exceeded_by(row):
            return row.ref
        # A link whose check does not hold names no preview: the GET that follows derives it again.
        found = self.variants.followed(await self.variants.index.variant(row.ref, spec.key))
        return found.ref if found is not None and found.state == "ok" else None

    async def preview(self, text: str, size: int, tenant: str | None) -> tuple[ImageRef, bytes | bytearray]:
        spec = preview_spec(size)
        _, row = await self.reads.row(text, tenant)
        if not spec.exceeded_by(row):
            return await self.reads.read(text, tenant)
        variant = await self.variants.variant(row, spec, tenant)
        return await self.variants.read(row, variant, spec, tenant)
