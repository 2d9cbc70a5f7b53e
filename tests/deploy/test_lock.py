"""deploy/requirements.lock, which the container installs by hash, holds every runtime dependency of
pyproject.toml at a version its specifier allows, each pinned with its hashes (`make lock` makes it anew)."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.podman import ROOT

PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)(?: ; (.+?))? \\$", re.M)


def pins() -> dict[str, tuple[Version, str | None]]:
    text = (ROOT / "deploy" / "requirements.lock").read_text()
    return {canonicalize_name(n): (Version(v), marker) for n, v, marker in PIN.findall(text)}


def test_every_runtime_dependency_is_pinned_within_its_specifier() -> None:
    pinned = pins()
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for line in dependencies:
        wanted = Requirement(line)
        version, marker = pinned[canonicalize_name(wanted.name)]
        assert wanted.specifier.contains(version), f"{wanted}: the lock has {version}"
        assert (marker or None) == (str(wanted.marker).replace('"', "'") if wanted.marker else None)


def test_every_pin_carries_hashes() -> None:
    text = (ROOT / "deploy" / "requirements.lock").read_text()
    blocks = re.split(r"^(?=[A-Za-z0-9._-]+==)", text, flags=re.M)[1:]
    assert len(blocks) == len(pins())
    assert all(re.search(r"--hash=sha256:[0-9a-f]{64}", block) for block in blocks)
