"""What ships with the package (attachstore/shipped): the units pass systemd's own checks, the example
configuration loads and names every key, every key is documented, and the commands that hand them to an
operator write them as they are, but for the installation's own path."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from attachstore.config import Config, load

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "attachstore" / "shipped"
UNITS = ("attachstore.service", "attachstore-gc.service", "attachstore-gc.timer")


def keys(struct: Any, prefix: str = "") -> list[str]:
    """Every configuration key, dotted, from the typed configuration itself."""
    found = []
    for field in msgspec.structs.fields(struct):
        name = f"{prefix}{field.name}"
        found.append(name)
        kind = field.type
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            found += keys(kind, f"{name}.")
    return found


def test_the_example_configuration_loads_and_names_every_key() -> None:
    example = DEPLOY / "attachstore.example.toml"
    load(str(example), env={})
    text = example.read_text()
    missing = [k for k in keys(Config) if k.split(".")[-1] not in text and k not in ("routes", "tenants")]
    assert missing == []


def test_every_key_is_documented() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [k for k in keys(Config) if not re.search(rf"\b{k.split('.')[-1]}\b", text)]
    assert missing == []


def test_memory_max_holds_what_the_default_caps_allow() -> None:
    """docs/operations.md#memory: on 8 cores, the supervisor and 8 serving workers (serve's default), the
    admissions' bodies, 8 decode workers (fitting images, as they do by default), and 1.4 GB for renders in
    progress, within the shipped unit's MemoryMax; and no more than a gigabyte beyond, so that the ceiling
    still means something."""
    config = Config()
    cap = config.http.body_cap(config.limits)
    cores = 8
    process = 50e6 + cores * 100e6
    admissions = 2.5 * max(config.admission.buffered_bytes(cap), cores * cap)
    worker = 40e6 + 14 * config.limits.max_pixels
    if config.admission.oversize == "fit":
        # Measured: a still WebP at the source bounds (8192 x 8192) peaks at 1,061 MB in its worker.
        worker = max(worker, 40e6 + 16 * config.admission.fit_max_pixels)
    renders = 1.4e9
    [limit] = re.findall(r"^MemoryMax=(\d+)G$", (DEPLOY / "attachstore.service").read_text(), re.M)
    total = process + admissions + cores * worker + renders
    assert total <= int(limit) * 2**30 < total + 2**30


def test_the_default_body_cap_takes_one_image_at_the_source_bounds() -> None:
    """An image of fit_max_bytes passes the body cap by JSON (base64 and its framing) and by multipart."""
    config = Config()
    cap = config.http.body_cap(config.limits)
    largest = config.admission.upload_limits(config.limits).max_image_bytes
    assert largest == config.admission.fit_max_bytes == 20 * 2**20
    assert (largest + 2) // 3 * 4 + 4096 <= cap
    assert largest <= config.limits.max_batch_bytes


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", ["attachstore.service", "attachstore-gc.service", "attachstore-gc.timer"])
def test_units_pass_systemd_analyze_verify(tmp_path: Path, unit: str) -> None:
    # Point ExecStart at a binary that exists here; everything else is checked as shipped.
    for name in UNITS:
        text = (DEPLOY / name).read_text().replace("/usr/local/bin/attachstore", sys.executable)
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    problems = [line for line in done.stderr.splitlines() if str(tmp_path) in line or "attachstore" in line]
    assert (done.returncode, problems) == (0, []), done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", ["attachstore.service", "attachstore-gc.service"])
def test_both_services_are_sandboxed_to_systemds_ok_level(unit: str) -> None:
    """`systemd-analyze security` rates each service's exposure from 0 (safe) to 10 (exposed); below 2 it says
    "OK". The daemon's unit was 1.8; the gc unit was 8.7 before it took the daemon's sandbox (issue 33)."""
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(DEPLOY / unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    [level] = re.findall(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert float(level) < 2.0, done.stdout


def test_deploy_systemd_writes_the_units_naming_this_installation(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "attachstore"
    done = subprocess.run(
        [str(script), "deploy", "systemd", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for name in UNITS:
        shipped = (DEPLOY / name).read_text()
        assert (tmp_path / name).read_text() == shipped.replace("/usr/local/bin/attachstore", str(script))
    assert f"ExecStart={script} serve" in (tmp_path / "attachstore.service").read_text()


def test_config_example_prints_the_shipped_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attachstore", "config", "example"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, (DEPLOY / "attachstore.example.toml").read_text())
