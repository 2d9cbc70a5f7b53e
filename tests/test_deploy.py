"""What ships in deploy/: the units pass systemd's own check, the example configuration loads and names every
key, and every key is documented."""

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

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


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
    for name in ("attachstore.service", "attachstore-gc.service", "attachstore-gc.timer"):
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
