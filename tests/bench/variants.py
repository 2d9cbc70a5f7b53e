"""The variant scenario: a render that must derive route-sized variants, against the same render once they
are cached (docs/normalization.md). In-process, on the service and render functions the daemon's handler
calls, so that the figure is the image work and the cache, not HTTP."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec

from attachstore.config import Config
from attachstore.render import RenderRequest, render
from attachstore.service import Store, Upload

from . import workload

SIDE = 768  # a cheaper route's long edge


def _photos(n: int) -> list[bytes]:
    """2000x1500 JPEG photos, all different: what a phone sends, already at the admission limits."""
    return [workload.admit_image(3 * i + 1).data for i in range(n)]


def _request(route: str, refs: list[str]) -> RenderRequest:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": f"photo {i}"}, {"type": "image", "ref": ref}]}
        for i, ref in enumerate(refs)
    ]
    return msgspec.convert({"route": route, "messages": messages}, RenderRequest)


async def _run(data_dir: Path, images: int, rounds: int, cached_renders: int) -> dict[str, Any]:
    # One route per round, each with its own side: every round's first render derives afresh.
    routes = {
        f"r{r}": {
            "input_modalities": ["text", "image"],
            "provider": "openai-chat",
            "max_request_side": SIDE + r,
        }
        for r in range(rounds)
    }
    config = msgspec.convert(
        {"data_dir": str(data_dir), "routes": routes, "admission": {"decode_workers": 0}}, Config
    )
    store = await Store.open(config)
    try:
        photos = _photos(images)
        admitted = await store.admit([Upload.of_bytes(p) for p in photos], "user")
        refs = [a.ref for a in admitted.attachments]
        first: list[float] = []
        cached: list[float] = []
        for r in range(rounds):
            request = _request(f"r{r}", refs)
            t0 = time.perf_counter()
            out = await render(store, request)
            first.append(time.perf_counter() - t0)
            if out.summary.resized != images:
                raise RuntimeError(f"variant: expected {images} resized images, got {out.summary}")
            laps = []
            for _ in range(cached_renders):
                t0 = time.perf_counter()
                again = await render(store, request)
                laps.append(time.perf_counter() - t0)
                if again.body != out.body:
                    raise RuntimeError("variant: a cached render differs from the first")
            cached.append(statistics.median(laps))
        derived = store.metrics.registry.get_sample_value("attachstore_variants_total", {"result": "derived"})
        return {
            "workload": (
                f"render (openai-chat) of {images} different 2000x1500 JPEG photos for a route with "
                f"max_request_side about {SIDE}, in-process; a fresh route each round"
            ),
            "baseline": "the same render again, its variants cached (median of "
            f"{cached_renders} renders per round)",
            "images": images,
            "decode_workers": store.pool.size,
            "variants_derived": int(derived),
            "first_ms": statistics.median(first) * 1000,
            "cached_ms": statistics.median(cached) * 1000,
            "rounds": {"first_ms": [x * 1000 for x in first], "cached_ms": [x * 1000 for x in cached]},
            # How many times faster a render is once its variants exist.
            "speedup": statistics.median(f / c for f, c in zip(first, cached, strict=True)),
        }
    finally:
        await store.close()


def variant(work: Path, quick: bool) -> dict[str, Any]:
    images, rounds, cached = (2, 1, 2) if quick else (8, 3, 5)
    return asyncio.run(_run(work / "store-variant", images, rounds, cached))
