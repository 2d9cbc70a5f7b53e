"""The read scenario's ceiling: the least every verified read must do, as fast as this machine does it.

    python -m tests.bench.ceiling SECONDS PROCESSES FILE...   # prints {"reads", "seconds", "rps"} as JSON

PROCESSES processes (one per core, as the daemon's workers) each open, read in full, sha256 and close the
files in turn for SECONDS, with no HTTP, no index and no header check. No daemon that keeps the promise "every
read re-hashes the whole object" can serve more verified reads per second than this on the same cores; the
read scenario sets it beside nginx's rate to show how much of nginx's rate the promise leaves reachable.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sys
import time


def _loop(paths: list[str], seconds: float) -> int:
    reads = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for path in paths:
            with open(path, "rb") as f:
                hashlib.sha256(f.read()).digest()
        reads += len(paths)
    return reads


def measure(paths: list[str], seconds: float, processes: int) -> dict[str, float]:
    """Each process loops for `seconds` from its own start, so the rate is the sum of their counts over it."""
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        counts = pool.starmap(_loop, [(paths, seconds)] * processes)
    reads = sum(counts)
    return {"reads": reads, "seconds": seconds, "rps": reads / seconds}


def main() -> None:
    seconds, processes, paths = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    json.dump(measure(paths, seconds, processes), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
