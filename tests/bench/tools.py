"""The baselines' tools (nginx, wrk): found on PATH, or installed with apt-get when running as root."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
# Debian's package names, most preferred first: nginx-light is the smallest build that serves static files.
NGINX_PACKAGES = ("nginx-light", "nginx")


@dataclass
class Tools:
    nginx: str | None
    wrk: str | None
    notes: list[str]


def _which(name: str) -> str | None:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")
    return found


def _apt(packages: list[str], notes: list[str]) -> bool:
    """apt-get install, without letting the packages start their services (policy-rc.d says no)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    wrote_policy = False
    try:
        if not POLICY_RC_D.exists():
            # The nginx package would otherwise start a system-wide nginx on port 80 after installing.
            POLICY_RC_D.write_text("#!/bin/sh\nexit 101\n")
            POLICY_RC_D.chmod(0o755)
            wrote_policy = True
        for attempt in ("install", "update-then-install"):
            if attempt == "update-then-install":
                subprocess.run(
                    ["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=240, check=False
                )
            done = subprocess.run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode == 0:
                notes.append(f"installed with apt-get: {' '.join(packages)}")
                return True
        notes.append(f"apt-get install {' '.join(packages)} failed: {done.stderr.strip()[-300:]}")
        return False
    except (OSError, subprocess.TimeoutExpired) as e:
        notes.append(f"apt-get install {' '.join(packages)} failed: {e}")
        return False
    finally:
        if wrote_policy:
            POLICY_RC_D.unlink(missing_ok=True)


def find(install: bool) -> Tools:
    """nginx and wrk if present; with `install` (and root, and apt-get), install the missing ones first."""
    notes: list[str] = []
    nginx, wrk = _which("nginx"), _which("wrk")
    can_install = install and hasattr(os, "geteuid") and os.geteuid() == 0 and _which("apt-get") is not None
    if install and not can_install and (nginx is None or wrk is None):
        notes.append("nginx/wrk missing and cannot be installed here (needs root and apt-get)")
    if can_install and wrk is None and _apt(["wrk"], notes):
        wrk = _which("wrk")
    if can_install and nginx is None:
        for package in NGINX_PACKAGES:
            if _apt([package], notes):
                nginx = _which("nginx")
                break
    return Tools(nginx, wrk, notes)
