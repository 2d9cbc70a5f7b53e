"""Image token estimates, per provider, from each provider's published formula (sources in docs/render.md)."""

from __future__ import annotations

from math import ceil


def openai(width: int, height: int, detail: str | None) -> int:
    # Low detail: 85. Else: fit in 2048x2048, shortest side down to 768, then 85 + 170 per 512px tile.
    if detail == "low":
        return 85
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return 85 + 170 * ceil(w / 512) * ceil(h / 512)


ANTHROPIC_MAX_PIXELS = 1600 * 750  # past about 1,600 tokens an image is scaled down further


def anthropic(width: int, height: int) -> int:
    # Long edge down to at most 1568, the area to at most ~1.2 MP, then ceil(width * height / 750).
    w, h = float(width), float(height)
    if max(w, h) > 1568:
        w, h = w * 1568 / max(w, h), h * 1568 / max(w, h)
    if w * h > ANTHROPIC_MAX_PIXELS:
        scale = (ANTHROPIC_MAX_PIXELS / (w * h)) ** 0.5
        w, h = w * scale, h * scale
    return ceil(w * h / 750)


def gemini(width: int, height: int) -> int:
    # 258 when both sides are at most 384 px, else 258 per 768x768 tile.
    if width <= 384 and height <= 384:
        return 258
    return 258 * ceil(width / 768) * ceil(height / 768)


def estimate(provider: str, width: int, height: int, detail: str | None = None) -> int:
    if provider.startswith("openai"):
        return openai(width, height, detail)
    if provider == "anthropic":
        return anthropic(width, height)
    return gemini(width, height)
