"""How many cores this process may use: its CPU affinity, bounded by its cgroups' CPU quota."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path


def cores(root: Path = Path("/")) -> int:
    """Its CPU affinity, bounded by its cgroups' CPU quota rounded up: the host's core count would start
    more workers than a container may run."""
    affinity = getattr(os, "sched_getaffinity", None)
    found = max(1, len(affinity(0))) if affinity is not None else os.cpu_count() or 1
    quota = cpu_quota(root)
    return found if quota is None else max(1, min(found, math.ceil(quota)))


def cpu_quota(root: Path = Path("/")) -> float | None:
    try:
        lines = (root / "proc" / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    mount = root / "sys" / "fs" / "cgroup"
    found: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers, path = parts[1], parts[2]
        if not controllers:  # v2: one hierarchy
            found += _quotas(mount, path, _v2_quota)
        elif "cpu" in controllers.split(","):
            for name in (controllers, "cpu", "cpu,cpuacct"):
                if (mount / name).is_dir():
                    found += _quotas(mount / name, path, _v1_quota)
                    break
    return min(found, default=None)


def _quotas(base: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    # where the path is not there (a container that sees its host's path), the mount's own is the container's
    here = base / path.strip("/")
    if not here.is_dir():
        here = base
    dirs = [here, *(p for p in here.parents if p == base or base in p.parents)]
    return [q for d in dirs if (q := read(d)) is not None]


def _v2_quota(cgroup: Path) -> float | None:
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _v1_quota(cgroup: Path) -> float | None:
    try:
        quota = int((cgroup / "cpu.cfs_quota_us").read_text())
        period = int((cgroup / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError, ZeroDivisionError):
        return None
