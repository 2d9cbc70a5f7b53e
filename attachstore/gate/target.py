"""What normalize.fit aims at and what it gives back (docs/normalization.md)."""

from __future__ import annotations

from dataclasses import dataclass


class Unfittable(Exception): ...  # str(e) is one line a user or model can read


@dataclass(frozen=True, slots=True)
class Target:
    max_side: int  # pixels on the longest side
    max_pixels: int  # width * height
    max_bytes: int  # encoded size


@dataclass(frozen=True, slots=True)
class Normalized:
    data: bytes
    media_type: str  # image/png | image/jpeg | image/webp | image/gif
    width: int
    height: int
    # What was done, in this order: "orientation", "colour", "metadata", "resized", "palette", "reencoded".
    steps: tuple[str, ...]


def steps(orientation: int, converted: bool, metadata: bool, resized: bool, palette: bool) -> tuple[str, ...]:
    done = {
        "orientation": orientation != 1,
        "colour": converted,
        "metadata": metadata,
        "resized": resized,
        "palette": palette,
    }
    return (*(step for step, yes in done.items() if yes), "reencoded")
