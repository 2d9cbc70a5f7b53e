"""The scale-out scenario: daemons on S3 (Ceph RGW) + PostgreSQL against a daemon on the local backends, in
the same run (docs/scale-out.md). Ceph and PostgreSQL are the throw-away ones of tests/support/services.py,
installed and started here; they share the machine with the daemons and the load generator, so the ratios
are what one small box gives, not what a real cluster would."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from tests.support import services

from . import workload
from .drive import Result, post_each
from .procs import Daemon
from .scenarios import Bench, _bodies, _check_errors, _side
from .stats import paired_ratio
from .workload import MULTIPART, Item


def _toml(value: Any) -> str:
    return json.dumps(value)  # a TOML basic string or integer is written the same as in JSON


def _config(path: Path, storage: dict[str, Any], index: dict[str, Any]) -> Path:
    lines = ["[storage]", *(f"{k} = {_toml(v)}" for k, v in storage.items())]
    lines += ["[index]", *(f"{k} = {_toml(v)}" for k, v in index.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _admit(daemon: Daemon, item: Item) -> str:
    answer = daemon.request("POST", "/v1/attachments", workload.multipart(item), MULTIPART)
    ref: str = answer["attachments"][0]["ref"]
    return ref


def scaleout(b: Bench) -> dict[str, Any]:
    up = services.up()
    bucket = services.fresh_bucket(up)
    if up.postgres_dsn is None or up.s3_endpoint is None:
        raise RuntimeError("scaleout: the test services did not come up")
    dsn = services.fresh_database(up.postgres_dsn)
    s3 = {
        "backend": "s3",
        "endpoint": up.s3_endpoint,
        "bucket": bucket,
        "region": up.s3_region,
        "access_key_id": up.s3_access_key,
        "secret_access_key": up.s3_secret_key,
    }
    pg = {"backend": "postgresql", "dsn": dsn}
    work = b.dir("scaleout")
    plain = _config(work / "s3.toml", s3, pg)
    cached = _config(work / "s3-cache.toml", s3 | {"cache_dir": str(work / "cache")}, pg)
    try:
        with contextlib.ExitStack() as stack:
            local = stack.enter_context(Daemon(work / "store-local", work / "local.log"))
            remote = stack.enter_context(Daemon(work / "store-s3", work / "s3.log", plain))
            cache = stack.enter_context(Daemon(work / "store-s3-cache", work / "s3-cache.log", cached))
            return _measure(b, local, remote, cache)
    finally:
        services.drop_database(dsn)


def _measure(b: Bench, local: Daemon, remote: Daemon, cache: Daemon) -> dict[str, Any]:
    p = b.plan
    items = workload.read_images(p.read_objects)
    refs = [_admit(local, it) for it in items]
    if [_admit(remote, it) for it in items] != refs:  # the cache node shares remote's bucket and database
        raise RuntimeError("scaleout: the S3 store gave other refs for the same bytes")
    paths = [f"/v1/attachments/{r}" for r in refs]
    for daemon in (local, remote, cache):  # warm: connections, and the cache node's cache
        b.driver.run(daemon.base, 16, max(p.warmup_seconds, 0.3), paths=paths)
    reads: dict[str, list[Result]] = {"local": [], "s3": [], "s3_cache": []}
    for _ in range(p.rounds):
        for name, daemon in (("local", local), ("s3", remote), ("s3_cache", cache)):
            reads[name].append(b.driver.run(daemon.base, 16, p.read_seconds, paths=paths))
    for name, samples in reads.items():
        _check_errors(f"scaleout read ({name})", samples)

    n = p.admit_per_round
    fresh = workload.admit_images(n * p.short_rounds)
    bodies = _bodies(b.dir("scaleout-bodies"), fresh)
    admits: dict[str, list[Result]] = {"local": [], "s3": []}
    for r in range(p.short_rounds):
        # Each side gets images new to it: the same ones, so that both do the same work.
        chunk = bodies[n * r : n * r + n]
        admits["local"].append(post_each(local.base + "/v1/attachments", chunk, MULTIPART, 8, b.work))
        admits["s3"].append(post_each(remote.base + "/v1/attachments", chunk, MULTIPART, 8, b.work))
    for name, samples in admits.items():
        _check_errors(f"scaleout admit ({name})", samples)
    return {
        "workload": (
            f"GET cycling through {len(refs)} ~300 KB JPEGs at 16 connections ({b.driver.name}); admissions "
            f"of {n} new images per round at concurrency 8 (the admit mix)"
        ),
        "backends": "Ceph RGW (memstore OSD) and PostgreSQL 15 on this machine, with the daemons",
        "read": {name: _side(samples) for name, samples in reads.items()},
        "admit": {name: _side(samples) for name, samples in admits.items()},
        "read_ratio": paired_ratio(reads["s3"], reads["local"], "rps"),
        "read_cache_ratio": paired_ratio(reads["s3_cache"], reads["local"], "rps"),
        "read_p99_ratio": paired_ratio(reads["s3"], reads["local"], "p99_ms"),
        "read_cache_p99_ratio": paired_ratio(reads["s3_cache"], reads["local"], "p99_ms"),
        "admit_ratio": paired_ratio(admits["s3"], admits["local"], "rps"),
        "admit_p99_ratio": paired_ratio(admits["s3"], admits["local"], "p99_ms"),
    }
