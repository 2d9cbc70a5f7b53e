"""The read scenario's ceiling: the least every verified read must do, as fast as this machine does it.

    python -m tests.bench.ceiling [--at-least-one] SECONDS PROCESSES HASH FILE...
    # prints {"reads", "seconds", "rps"} as JSON

PROCESSES processes (one per core, as the daemon's workers) each open, read in full, hash and close the
files in turn for SECONDS (with --at-least-one, each process goes through them once however late it
starts), with no HTTP, no index and no header check. HASH is the hash a read verifies
with: `check`, the keyed BLAKE3 check the daemon verifies sha256 objects by (docs/security.md), or
`sha256`, the address itself (what reads hashed before the check). No daemon that keeps the promise "every
read hashes every byte it serves" with that hash can serve more verified reads per second than this on the
same cores.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sys
import time
from collections.abc import Callable

import blake3

_KEY = bytes(range(32))  # any key costs the same


def _hash(name: str) -> Callable[[bytes], object]:
    if name == "check":
        return lambda data: blake3.blake3(data, key=_KEY).hexdigest()
    if name == "sha256":
        return lambda data: hashlib.sha256(data).hexdigest()
    raise SystemExit(f"unknown hash {name!r}: check or sha256")


def _loop(paths: list[str], seconds: float, name: str, at_least_one: bool = False) -> int:
    digest = _hash(name)
    reads = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or (at_least_one and not reads):
        for path in paths:
            with open(path, "rb") as f:
                digest(f.read())
        reads += len(paths)
    return reads


def measure(
    paths: list[str], seconds: float, processes: int, name: str = "check", at_least_one: bool = False
) -> dict[str, float]:
    """Each process loops for `seconds` from its own start, so the rate is the sum of their counts over it."""
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        counts = pool.starmap(_loop, [(paths, seconds, name, at_least_one)] * processes)
    reads = sum(counts)
    return {"reads": reads, "seconds": seconds, "rps": reads / seconds}


def main() -> None:
    args = sys.argv[1:]
    at_least_one = args[:1] == ["--at-least-one"]
    args = args[1:] if at_least_one else args
    seconds, processes, name, paths = float(args[0]), int(args[1]), args[2], args[3:]
    json.dump(measure(paths, seconds, processes, name, at_least_one), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
