"""`cores()`: the CPU affinity, and no more than a CPU quota of the process's cgroups allows (a container run
with --cpus 0.5 gets one worker, not one per host core). The cgroup files are faked under a root of the
test's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attachstore.cores import cores


@pytest.fixture(autouse=True)
def eight_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)), raising=False)


def fake(root: Path, cgroup: str, files: dict[str, str]) -> Path:
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text(cgroup)
    for name, text in files.items():
        path = root / "sys" / "fs" / "cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("50000 100000\n", 1), ("150000 100000\n", 2), ("400000 100000\n", 4), ("max 100000\n", 8)],
)
def test_a_cgroup_v2_quota_bounds_the_cores(tmp_path: Path, cpu_max: str, expected: int) -> None:
    root = fake(
        tmp_path,
        "0::/system.slice/attachstore.service\n",
        {"system.slice/attachstore.service/cpu.max": cpu_max},
    )
    assert cores(root) == expected


def test_the_smallest_quota_on_the_way_up_counts(tmp_path: Path) -> None:
    root = fake(
        tmp_path,
        "0::/a/b\n",
        {"a/b/cpu.max": "max 100000\n", "a/cpu.max": "200000 100000\n", "cpu.max": "max 100000\n"},
    )
    assert cores(root) == 2


def test_inside_a_container_the_cgroup_is_the_root(tmp_path: Path) -> None:
    # A cgroup namespace shows "/": the container's own limit is at the top of the mount.
    root = fake(tmp_path, "0::/\n", {"cpu.max": "50000 100000\n"})
    assert cores(root) == 1


def test_a_quota_never_gives_more_than_the_affinity(tmp_path: Path) -> None:
    root = fake(tmp_path, "0::/\n", {"cpu.max": "1600000 100000\n"})
    assert cores(root) == 8


def test_cgroup_v1_cfs_quota(tmp_path: Path) -> None:
    root = fake(
        tmp_path,
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "50000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cores(root) == 1
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")
    assert cores(root) == 8


def test_no_cgroup_files_leave_the_affinity(tmp_path: Path) -> None:
    assert cores(tmp_path) == 8
    assert cores(fake(tmp_path, "0::/x\n", {"x/cpu.max": "garbage\n"})) == 8
