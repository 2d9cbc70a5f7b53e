"""Alternating measurement and its summaries."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Sample = dict[str, Any]


def alternate(
    rounds: int, a: Callable[[int], Sample], b: Callable[[int], Sample] | None
) -> tuple[list[Sample], list[Sample]]:
    """A, B, B, A, A, B, ...: `rounds` runs of each, in pairs, the side that goes first changing from one pair
    to the next (B may be absent: then A alone). Neither side always runs on what the other left behind:
    the second of a pair finds the files the first read in the page cache, which this host's reclaim
    (docs/performance.md) otherwise takes from whichever side runs first, every time."""
    out_a: list[Sample] = []
    out_b: list[Sample] = []
    for r in range(rounds):
        if b is not None and r % 2:
            out_b.append(b(r))
            out_a.append(a(r))
        else:
            out_a.append(a(r))
            if b is not None:
                out_b.append(b(r))
    return out_a, out_b


def median(samples: Sequence[Sample], key: str) -> float:
    values = [float(s[key]) for s in samples if s.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def summary(samples: Sequence[Sample], keys: Sequence[str] = ("rps", "p50_ms", "p99_ms")) -> dict[str, Any]:
    """Medians of `keys`, plus the per-round values and the total of errors."""
    out: dict[str, Any] = {k: median(samples, k) for k in keys}
    out["errors"] = sum(int(s.get("errors", 0)) for s in samples)
    out["rounds"] = {k: [s.get(k) for s in samples] for k in keys}
    return out


def paired_ratio(a: Sequence[Sample], b: Sequence[Sample], key: str, invert: bool = False) -> float:
    """Median over rounds of a[key] / b[key] (or b/a): each pair ran back to back, under the same noise."""
    ratios = []
    for x, y in zip(a, b, strict=True):
        num, den = (float(y[key]), float(x[key])) if invert else (float(x[key]), float(y[key]))
        if den > 0:
            ratios.append(num / den)
    return statistics.median(ratios) if ratios else float("nan")


def timed(tool: str, latencies: Sequence[float], seconds: float, errors: int = 0) -> Sample:
    """A side's result from its latencies (seconds) over `seconds` of wall time."""
    return {
        "tool": tool,
        "requests": len(latencies),
        "rps": len(latencies) / seconds,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "errors": errors,
        "seconds": seconds,
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank, the same definition as the bundled load generator's."""
    s = sorted(values)
    if not s:
        return float("nan")
    rank = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[rank]
