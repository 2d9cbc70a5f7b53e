"""How a byte count and a moment are written as text: for people (`human_bytes`), for clients and logs
(`rfc3339`)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(t: float, timespec: str = "milliseconds") -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop always returns
