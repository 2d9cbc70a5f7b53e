"""A one-line progress display for long commands: objects and bytes done, rate, ETA. Silent off a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .text import human_bytes

_INTERVAL = 0.1


class Progress:
    def __init__(
        self,
        label: str,
        objects: int,
        size: int,
        stream: TextIO | None = None,
        note: str = "",
        *,
        unit: str = "objects",
    ) -> None:
        self.label = label
        self.note = note  # said after the rate, e.g. "throttled to 50.0 MiB/s"
        self.unit = unit
        self.total_objects = objects
        self.total_bytes = size
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.objects = 0
        self.bytes = 0
        self._start = time.monotonic()
        self._shown = 0.0

    def advance(self, objects: int = 1, size: int = 0) -> None:
        self.objects += objects
        self.bytes += size
        now = time.monotonic()
        if self.enabled and now - self._shown >= _INTERVAL:
            self._shown = now
            self.stream.write("\r" + self.line(now) + "\x1b[K")
            self.stream.flush()

    def line(self, now: float) -> str:
        elapsed = max(now - self._start, 1e-9)
        rate = self.bytes / elapsed
        remaining = self.total_bytes - self.bytes
        if self.total_bytes and rate > 0:
            eta = f"ETA {int(remaining / rate) // 60}:{int(remaining / rate) % 60:02d}"
        else:
            eta = "ETA -"
        return (
            f"{self.label}: {self.objects}/{self.total_objects} {self.unit}, "
            f"{human_bytes(self.bytes)}/{human_bytes(self.total_bytes)}, {human_bytes(rate)}/s"
            + (f" ({self.note})" if self.note else "")
            + f", {eta}"
        )

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
