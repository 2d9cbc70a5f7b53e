"""The scenarios. Each measures attachstore and its baseline alternately in the same run and returns figures
(plain JSON-able dicts); report.py turns them into the table."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import synth, workload
from .drive import Driver, Result, post_each
from .nginx import Nginx
from .procs import CHECK_KEY, DAEMON_WORKERS, REPO, Daemon, MemorySampler, Profiler, attachstore_command
from .renderfloor import floor_render
from .servefloor import ServeFloor
from .spy import summarise
from .stats import alternate, paired_ratio, summary
from .workload import MULTIPART, Item


@dataclass(frozen=True)
class Plan:
    """Sizes and durations. `quick` shrinks everything so that a test can smoke-run the whole bench."""

    quick: bool
    rounds: int
    short_rounds: int  # admit, render and the scale reads and admits: short runs, so more of them
    warmup_seconds: float
    read_seconds: float
    read_connections: tuple[int, ...]
    read_objects: int
    admit_per_round: int
    admit_concurrency: int
    render_seconds: float
    render_images: int
    scale_small: int
    scale_large: int
    scale_read_seconds: float
    scale_read_refs: int
    scale_admit_per_round: int
    gc_rounds: int
    audit_rounds: int
    profile_seconds: float
    transcript_rounds: int  # strip and restore of the 1 GB rollout, each against the floor
    mcp_rounds: int  # one start-up of `attachstore mcp` and one of the floor each: short, so many of them
    convert_rounds: int  # one admission of each source format and one decode and encode of the floor each
    wrap_rounds: int  # tool calls through `attachstore mcp wrap` and to the bare server each
    wrap_calls: int  # calls without images a round

    @classmethod
    def make(cls, quick: bool, scale_objects: int | None, rounds: int | None) -> Plan:
        if quick:
            return cls(
                quick=True,
                rounds=rounds or 1,
                short_rounds=rounds or 1,
                warmup_seconds=0,  # no warm-up runs
                read_seconds=0.3,
                read_connections=(16, 64),
                read_objects=4,
                admit_per_round=3,
                admit_concurrency=8,
                render_seconds=0.3,
                render_images=4,
                scale_small=1000,
                scale_large=scale_objects or 2000,
                scale_read_seconds=0.3,
                scale_read_refs=100,
                scale_admit_per_round=8,
                gc_rounds=1,
                audit_rounds=1,
                profile_seconds=2,
                transcript_rounds=1,
                mcp_rounds=rounds or 2,
                convert_rounds=rounds or 2,
                wrap_rounds=rounds or 2,
                wrap_calls=20,
            )
        return cls(
            quick=False,
            rounds=rounds or 3,
            short_rounds=rounds or 5,
            warmup_seconds=1,
            read_seconds=2,  # wrk takes whole seconds
            read_connections=(16, 64),
            read_objects=20,
            admit_per_round=30,
            admit_concurrency=8,
            render_seconds=2,
            render_images=20,
            scale_small=1000,
            scale_large=scale_objects or 1_000_000,
            scale_read_seconds=2,
            scale_read_refs=2000,
            scale_admit_per_round=200,  # a p99 of 60 was the slowest one: noise
            gc_rounds=1,  # 26 s a dry run of a million objects; the five-minute budget allows one
            # The host pages out page cache untouched for a minute (DAMON): whichever side goes first in a
            # pair reads much of the million-object store from the disk. Four pairs: each side goes first
            # in two.
            audit_rounds=4,
            profile_seconds=5,
            transcript_rounds=rounds or 2,
            mcp_rounds=rounds or 25,
            convert_rounds=rounds or 9,
            wrap_rounds=rounds or 9,
            wrap_calls=500,
        )


@dataclass
class Bench:
    plan: Plan
    work: Path
    driver: Driver
    nginx: str | None
    nginx_note: str
    profile_dir: Path | None
    cache: Path
    notes: list[str] = field(default_factory=list)

    def dir(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _admit_http(daemon: Daemon, item: Item) -> str:
    answer = daemon.request("POST", "/v1/attachments", workload.multipart(item), MULTIPART)
    ref: str = answer["attachments"][0]["ref"]
    return ref


def _object_path(data_dir: Path, ref: str) -> Path:
    algorithm, digest = ref.split(":")
    return data_dir / "objects" / algorithm / digest[0:2] / digest[2:4] / digest


def _side(samples: list[Result]) -> dict[str, Any]:
    return summary(samples) | {"tool": samples[0].get("tool", "bundled") if samples else None}


def _check_errors(name: str, samples: list[Result]) -> None:
    bad = sum(int(s.get("errors", 0)) for s in samples)
    if bad:
        raise RuntimeError(f"{name}: {bad} requests failed: {[s.get('statuses') for s in samples]}")


# -- read ---------------------------------------------------------------------------------------------------


def read(b: Bench, daemon: Daemon) -> dict[str, Any]:
    """Verified GETs of ~300 KB JPEGs, cycling through `read_objects` of them, against nginx's sendfile."""
    p = b.plan
    items = workload.read_images(p.read_objects)
    refs = [_admit_http(daemon, it) for it in items]
    paths = [f"/v1/attachments/{r}" for r in refs]
    out: dict[str, Any] = {
        "objects": len(items),
        "object_bytes": round(sum(len(i.data) for i in items) / len(items)),
        "workload": f"GET cycling through {len(items)} different JPEG objects ({b.driver.name})",
        "baseline": "nginx static files (sendfile on, access_log off, worker_processes auto)",
        "levels": [],
    }
    root = b.dir("nginx-root") / "o"
    root.mkdir(exist_ok=True)
    nginx_paths = []
    for ref, it in zip(refs, items, strict=True):
        name = ref.split(":")[1] + ".jpg"
        (root / name).write_bytes(it.data)
        nginx_paths.append(f"/o/{name}")
    with contextlib.ExitStack() as stack:
        ng = stack.enter_context(Nginx(b.nginx, root.parent, b.dir("nginx"))) if b.nginx else None
        out["nginx"] = "available" if ng else f"unavailable: {b.nginx_note}"
        if ng is not None:
            # The same bytes on both sides.
            same = daemon.request("GET", paths[0]) == _get(ng.base + nginx_paths[0])
            if not same:
                raise RuntimeError("nginx and attachstore do not serve the same bytes")
        # What the promise leaves reachable: open, read and hash the same files with the hash reads verify
        # with (the keyed check), no HTTP, one process a core (the ceiling); the same over HTTP by the least
        # code that does it (the serving floor). Both run in the same rounds as the other sides.
        files = [str(_object_file(daemon.data_dir, r)) for r in refs]
        floor = stack.enter_context(ServeFloor(files, DAEMON_WORKERS))
        if _get(floor.base + floor.paths[0]) != daemon.request("GET", paths[0]):
            raise RuntimeError("the serving floor and attachstore do not serve the same bytes")
        b.driver.run(daemon.base, 16, p.warmup_seconds, paths=paths)
        b.driver.run(floor.base, 16, p.warmup_seconds, paths=floor.paths)
        if ng is not None:
            b.driver.run(ng.base, 16, p.warmup_seconds, paths=nginx_paths)
        for c in p.read_connections:
            a, n, f, cs = [], [], [], []
            for _ in range(p.rounds):
                a.append(b.driver.run(daemon.base, c, p.read_seconds, paths=paths))
                if ng is not None:
                    n.append(b.driver.run(ng.base, c, p.read_seconds, paths=nginx_paths))
                f.append(b.driver.run(floor.base, c, p.read_seconds, paths=floor.paths))
                cs.append(_ceiling(files, p.read_seconds, "check", p.quick))
            _check_errors(f"read c={c}", a)
            _check_errors(f"serving floor c={c}", f)
            level: dict[str, Any] = {
                "connections": c,
                "attachstore": _side(a),
                "ceiling": summary(cs, ("rps",)),
                "ceiling_ratio": paired_ratio(a, cs, "rps"),
                "serving_floor": _side(f),
                "floor_ratio": paired_ratio(a, f, "rps"),
            }
            if ng is not None:
                level |= {
                    "nginx": _side(n),
                    "rps_ratio": paired_ratio(a, n, "rps"),
                    "p99_ratio": paired_ratio(a, n, "p99_ms"),
                    # How near a server that hashes nothing comes to the ceiling, in the same rounds.
                    "nginx_ceiling_ratio": paired_ratio(n, cs, "rps"),
                }
            else:
                level |= {"nginx": "unavailable", "rps_ratio": "unavailable", "p99_ratio": "unavailable"}
            out["levels"].append(level)
        # The ceiling with sha256 (what reads hashed before the keyed check), for the record.
        out["ceiling_sha256"] = summary([_ceiling(files, p.read_seconds, "sha256", p.quick)], ("rps",))
        out["serving_floor"] = {
            "workload": f"{DAEMON_WORKERS} processes on one port answering each GET with a fixed head and "
            "the file read and checked with the keyed check, nothing else (tests/bench/servefloor.py)",
        }
        out["ceiling"] = {
            "workload": f"{DAEMON_WORKERS} processes each opening, reading and hashing (keyed BLAKE3, the "
            "check reads verify) the same files in turn, no HTTP (tests/bench/ceiling.py)",
        }
    if b.profile_dir is not None:
        c = max(p.read_connections)
        out["profile"] = _profiled(
            b,
            daemon,
            "read",
            lambda: b.driver.run(daemon.base, c, p.profile_seconds, paths=paths),
        )
    return out


def _object_file(data_dir: Path, ref: str) -> Path:
    algorithm, digest = ref.split(":")
    return data_dir / "objects" / algorithm / digest[0:2] / digest[2:4] / digest


def _ceiling(files: list[str], seconds: float, hash_name: str, at_least_one: bool) -> Result:
    """The ceiling's rate (`at_least_one`: each process reads the files once however short `seconds`)."""
    cmd = [sys.executable, "-m", "tests.bench.ceiling", *(["--at-least-one"] if at_least_one else [])]
    cmd += [str(seconds), str(DAEMON_WORKERS), hash_name, *files]
    done = subprocess.run(cmd, capture_output=True, cwd=REPO, check=True, timeout=seconds + 120)
    result: Result = json.loads(done.stdout)
    return result


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as answer:
        data: bytes = answer.read()
        return data


def _profiled(b: Bench, daemon: Daemon, name: str, load: Any) -> dict[str, Any]:
    """One extra, unmeasured run of `load` with py-spy recording the daemon and its workers."""
    assert b.profile_dir is not None
    if Profiler.available() is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    out = b.profile_dir / f"{name}.raw.txt"
    with Profiler(daemon.pid, out) as spy:
        load()
    if not out.exists():
        return {"error": "py-spy wrote nothing (is ptrace permitted?)"}
    return summarise(out, spy.seconds, Profiler.RATE) | {"raw": str(out)}


# -- admit --------------------------------------------------------------------------------------------------


def _floor_admit(b: Bench, listing: Path, is_base64: bool) -> Result:
    """The same images through the physical floor (admitfloor.py), one process per core."""
    cmd = [sys.executable, "-m", "tests.bench.admitfloor", str(b.dir("admit-floor")), str(DAEMON_WORKERS)]
    cmd += [str(listing), *(["--base64"] if is_base64 else [])]
    done = subprocess.run(cmd, capture_output=True, cwd=REPO, check=True, timeout=600)
    result: Result = json.loads(done.stdout)
    return result


def _bodies(directory: Path, items: list[Item], form: str = "multipart") -> list[Path]:
    """One request body per item: a multipart form, a JSON body, or (for the floor) the image's bytes
    ("raw") or its base64 text ("base64")."""
    out = []
    for i, it in enumerate(items):
        path = directory / f"{i:05d}-{it.name}.{form}"
        if form == "multipart":
            path.write_bytes(workload.multipart(it))
        elif form == "json":
            path.write_bytes(workload.json_body(it))
        elif form == "raw":
            path.write_bytes(it.data)
        else:
            path.write_bytes(base64.b64encode(it.data))
        out.append(path)
    return out


def _listing(directory: Path, name: str, paths: list[Path]) -> Path:
    listing = directory / f"{name}.list"
    listing.write_text("".join(f"{p}\n" for p in paths))
    return listing


PATHS = ("multipart", "json")
_FLOOR_FORM = {"multipart": "raw", "json": "base64"}
_CONTENT_TYPE = {"multipart": MULTIPART, "json": "application/json"}


def admit(b: Bench, daemon: Daemon) -> tuple[dict[str, Any], dict[str, Any]]:
    """New images (PNG screenshot, JPEG photo, WebP, in turn) at concurrency 8, over each path (multipart
    and JSON), each against the physical floor of the same images (admitfloor.py). Also the daemon's peak
    memory meanwhile."""
    p = b.plan
    warm = 3
    profile_n = 3 * max(4, round(p.profile_seconds * 4)) if b.profile_dir else 0  # a few seconds' worth
    per_path = p.short_rounds * p.admit_per_round
    total = 2 * warm + 2 * per_path + profile_n
    started = time.perf_counter()
    items = workload.admit_images(total)
    made = time.perf_counter() - started
    if len({it.data for it in items}) != len(items):
        raise RuntimeError("admit: the generated images are not all different")
    url = daemon.base + "/v1/attachments"
    c = p.admit_concurrency
    # Each path has images of its own (every admission is a new object), in the same mix.
    share = {path: items[i * (warm + per_path) : (i + 1) * (warm + per_path)] for i, path in enumerate(PATHS)}
    bodies = {path: _bodies(b.dir(f"admit-{path}"), share[path], path) for path in PATHS}
    floors = {path: _bodies(b.dir(f"admit-floor-{path}"), share[path], _FLOOR_FORM[path]) for path in PATHS}

    def over_http(path: str, lo: int, hi: int) -> Result:
        return post_each(url, bodies[path][lo:hi], _CONTENT_TYPE[path], c, b.work)

    def floor(path: str, lo: int, hi: int) -> Result:
        listing = _listing(b.work, f"floor-{path}-{lo}", floors[path][lo:hi])
        return _floor_admit(b, listing, path == "json")

    for path in PATHS:
        over_http(path, 0, warm)  # starts the decode workers
        floor(path, 0, warm)
    http: dict[str, list[Result]] = {path: [] for path in PATHS}
    floored: dict[str, list[Result]] = {path: [] for path in PATHS}
    with MemorySampler(daemon.pid) as mem:
        for r in range(p.short_rounds):
            lo = warm + r * p.admit_per_round
            hi = lo + p.admit_per_round
            for path in PATHS:
                mem.active = True
                http[path].append(over_http(path, lo, hi))
                mem.active = False  # the sampler thread would steal the floor's CPU for nothing
                floored[path].append(floor(path, lo, hi))
    for path in PATHS:
        _check_errors(f"admit {path} (HTTP)", http[path])
    profile = None
    if b.profile_dir is not None:
        extra = items[2 * (warm + per_path) :]
        json_bodies = _bodies(b.dir("admit-profile"), extra, "json")
        profile = _profiled(
            b,
            daemon,
            "admit",
            lambda: post_each(url, json_bodies, "application/json", c, b.work),
        )
    kinds = {k: [len(it.data) for it in items if it.media_type == f"image/{k}"] for k in workload.KINDS}
    out: dict[str, Any] = {
        "workload": (
            f"{p.admit_per_round} new images per round and path, concurrency {c}, one image per request, "
            "multipart (raw bytes) and JSON (base64); a 1280x800 PNG screenshot, a 2000x1500 JPEG photo "
            "(q85) and a 1024x768 WebP in turn, each with a few pixels changed so that no admission is a "
            "dedup"
        ),
        "floor": (
            f"tests/bench/admitfloor.py: {DAEMON_WORKERS} processes (one per core) each taking the same "
            "images in turn: for JSON one base64 decode; a full decode of every frame with Pillow, sha256, "
            "a staging file written + fsynced, linked, the directory chain fsynced, one SQLite commit per "
            "image (WAL, synchronous=FULL); nothing of attachstore's"
        ),
        "image_bytes": {k: round(sum(v) / len(v)) for k, v in kinds.items() if v},
        "images_per_side": per_path,
        "rounds": p.short_rounds,
        "generate_seconds": made,
    }
    for path in PATHS:
        out[path] = {
            "attachstore": _side(http[path]),
            "floor": _side(floored[path]),
            "ratio": paired_ratio(http[path], floored[path], "rps"),
        }
    if profile is not None:
        out["profile"] = profile
    memory = {
        "during": "the admit scenario: VmHWM over all of it, samples during the HTTP rounds",
        "processes": mem.processes,
        "peak_rss_mb": mem.hwm_sum / 1e6,
        "peak_rss_sum_sampled_mb": mem.peak_sum / 1e6,
        "per_process_hwm_mb": sorted((v / 1e6 for v in mem.hwm.values()), reverse=True),
        "method": "VmHWM of the daemon and every decode worker, reset before the scenario (clear_refs), "
        "summed; and the highest sum of VmRSS sampled every 20 ms",
    }
    return out, memory


# -- render -------------------------------------------------------------------------------------------------


def _conversation(refs: list[str]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful visual assistant."}]
    for i, ref in enumerate(refs):
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Here is screenshot {i}. What changed since the last one?"},
                    {"type": "image", "ref": ref},
                ],
            }
        )
        messages.append({"role": "assistant", "content": f"In screenshot {i}, the dialog moved to the left."})
    return {"provider": "openai-chat", "messages": messages}


def render(b: Bench, daemon: Daemon) -> dict[str, Any]:
    p = b.plan
    items = workload.render_images(p.render_images)
    refs = [_admit_http(daemon, it) for it in items]
    body = json.dumps(_conversation(refs)).encode()
    body_file = b.dir("render") / "request.json"
    body_file.write_bytes(body)
    answer = daemon.request("POST", "/v1/render", body, "application/json")
    if answer["summary"]["included"] != len(refs):
        raise RuntimeError(f"render: expected {len(refs)} images included, got {answer['summary']}")
    answer_bytes = len(json.dumps(answer))
    files = [_object_path(daemon.data_dir, r) for r in refs]
    b.driver.run(
        daemon.base,
        1,
        p.warmup_seconds,
        paths=["/v1/render"],
        body=body_file,
        content_type="application/json",
    )
    floor_render(files, p.warmup_seconds, bytes.fromhex(CHECK_KEY))
    a, f = alternate(
        p.short_rounds,
        lambda _r: b.driver.run(
            daemon.base,
            1,
            p.render_seconds,
            paths=["/v1/render"],
            body=body_file,
            content_type="application/json",
        ),
        lambda _r: floor_render(files, p.render_seconds, bytes.fromhex(CHECK_KEY)),
    )
    _check_errors("render", a)
    profile = None
    if b.profile_dir is not None:
        profile = _profiled(
            b,
            daemon,
            "render",
            lambda: b.driver.run(
                daemon.base,
                1,
                p.profile_seconds,
                paths=["/v1/render"],
                body=body_file,
                content_type="application/json",
            ),
        )
    return {
        "workload": (
            f"POST /v1/render, openai-chat, a {len(refs)}-image conversation "
            f"({sum(len(i.data) for i in items) / 1e6:.1f} MB of JPEG, "
            f"{answer['summary']['base64_bytes'] / 1e6:.1f} MB of base64), one render at a time "
            "(1 connection)"
        ),
        "floor": "one process, one render after another: read + keyed check + base64 (pybase64) of the same "
        "20 object files, sent over loopback TCP to a process that reads them (tests/bench/renderfloor.py)",
        "images": len(refs),
        "base64_bytes": answer["summary"]["base64_bytes"],
        "answer_bytes": answer_bytes,
        "attachstore": _side(a),
        "floor_in_process": _side(f),
        "ratio": paired_ratio(a, f, "rps"),
    } | ({"profile": profile} if profile else {})


# -- scale --------------------------------------------------------------------------------------------------


def _timed(cmd: list[str], stdout: Path) -> tuple[float, int]:
    with open(stdout, "wb") as out:
        start = time.perf_counter()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, cwd=REPO, check=False, timeout=3600)
        seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return seconds, done.returncode


def _rows(data_dir: Path) -> int:
    import sqlite3

    db = sqlite3.connect(data_dir / "index.sqlite3")
    try:
        return int(db.execute("SELECT count(*) FROM objects").fetchone()[0])
    finally:
        db.close()


def _gc(data_dir: Path, work: Path) -> Result:
    rows = _rows(data_dir)
    out = work / f"gc-{data_dir.name}.json"
    seconds, _ = _timed(
        [*attachstore_command(), "gc", "--data-dir", str(data_dir), "--dry-run", "--grace", "0s", "--json"],
        out,
    )
    planned = len(json.loads(out.read_bytes())["plan"]["garbage"])
    return {"seconds": seconds, "objects": rows, "garbage": planned, "objects_per_s": rows / seconds}


def _audit(data_dir: Path, work: Path) -> Result:
    out = work / f"audit-{data_dir.name}.json"
    seconds, _ = _timed([*attachstore_command(), "audit", "--data-dir", str(data_dir), "--json"], out)
    report = json.loads(out.read_bytes())
    return {
        "seconds": seconds,
        "files": report["files"],
        "bytes": report["bytes"],
        "findings": len(report["findings"]),
        "mb_per_s": report["bytes"] / seconds / 1e6,
    }


def _audit_profiled(b: Bench, data_dir: Path) -> dict[str, Any]:
    """One extra, unmeasured audit run under py-spy (started by it: the command is short-lived)."""
    assert b.profile_dir is not None
    spy = Profiler.available()
    if spy is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    out = b.profile_dir / "audit.raw.txt"
    record = [spy, "record", "--threads", "--format", "raw", "-r", str(Profiler.RATE), "-o", str(out)]
    command = [*attachstore_command(), "audit", "--data-dir", str(data_dir), "--json"]
    started = time.perf_counter()
    subprocess.run([*record, "--", *command], capture_output=True, cwd=REPO, check=False, timeout=3600)
    seconds = time.perf_counter() - started
    if not out.exists():
        return {"error": "py-spy wrote nothing (is ptrace permitted?)"}
    return summarise(out, seconds, Profiler.RATE) | {"raw": str(out)}


def _raw(data_dir: Path, work: Path) -> Result:
    out = work / f"raw-{data_dir.name}.json"
    seconds, _ = _timed([sys.executable, "-m", "tests.bench.rawhash", str(data_dir)], out)
    report = json.loads(out.read_bytes())
    return {
        "seconds": seconds,
        "files": report["files"],
        "bytes": report["bytes"],
        "mb_per_s": report["bytes"] / seconds / 1e6,
    }


def _scale_sides(samples: list[Result], keys: tuple[str, ...]) -> dict[str, Any]:
    s = summary(samples, keys)
    s.pop("errors", None)
    return s


def scale(b: Bench) -> dict[str, Any]:
    with synth.locked(b.cache):
        return _scale(b)


def _scale(b: Bench) -> dict[str, Any]:
    p = b.plan
    small = p.scale_small
    large = synth.fitting(b.cache, p.scale_large)
    if large != p.scale_large:
        b.notes.append(
            f"scale: {p.scale_large:,} objects do not fit on this disk; the large size is {large:,}"
        )
    started = time.perf_counter()
    made: dict[int, dict[str, Any]] = {}
    dirs: dict[int, Path] = {}
    for n in (small, large):
        dirs[n], made[n] = synth.prepare(b.cache, n)
    out: dict[str, Any] = {
        "sizes": [small, large],
        "synthesis": made,
        "object_bytes": synth.OBJECT_SIZE,
    }
    phases = {"synthesis": time.perf_counter() - started}
    # Both daemons start at once (each takes a second or so to import and open its store).
    ds = Daemon(dirs[small], b.work / "daemon-scale-small.log").start()
    dl = Daemon(dirs[large], b.work / "daemon-scale-large.log").start()
    with ds, dl:
        k = p.scale_read_refs
        paths = {n: [f"/v1/attachments/{r}" for r in synth.sample_refs(dirs[n], k)] for n in (small, large)}
        b.driver.run(ds.base, 16, p.warmup_seconds, paths=paths[small])
        b.driver.run(dl.base, 16, p.warmup_seconds, paths=paths[large])
        rs, rl = alternate(
            p.short_rounds,
            lambda _r: b.driver.run(ds.base, 16, p.scale_read_seconds, paths=paths[small]),
            lambda _r: b.driver.run(dl.base, 16, p.scale_read_seconds, paths=paths[large]),
        )
        _check_errors("scale read", rs + rl)
        per = p.scale_admit_per_round
        tiny = workload.tiny_pngs(4 + p.short_rounds * per)
        bodies = _bodies(b.dir("scale-bodies"), tiny)
        for d in (ds, dl) if p.warmup_seconds > 0 else ():
            post_each(d.base + "/v1/attachments", bodies[:4], MULTIPART, 8, b.work)
        as_, al = alternate(
            p.short_rounds,
            lambda r: post_each(
                ds.base + "/v1/attachments", bodies[4 + r * per : 4 + (r + 1) * per], MULTIPART, 8, b.work
            ),
            lambda r: post_each(
                dl.base + "/v1/attachments", bodies[4 + r * per : 4 + (r + 1) * per], MULTIPART, 8, b.work
            ),
        )
        _check_errors("scale admit", as_ + al)
    phases["read_and_admit"] = time.perf_counter() - started - sum(phases.values())
    out["read"] = {
        "workload": f"GET of {k} different stored objects in turn, 16 connections ({b.driver.name})",
        str(small): _side(rs),
        str(large): _side(rl),
        "p99_ratio": paired_ratio(rl, rs, "p99_ms"),
    }
    out["admit"] = {
        "workload": f"{per} new 64x64 PNGs (~12 KB) per round, concurrency 8, multipart (bundled)",
        str(small): _side(as_),
        str(large): _side(al),
        "p99_ratio": paired_ratio(al, as_, "p99_ms"),
    }
    gs, gl = alternate(p.gc_rounds, lambda _r: _gc(dirs[small], b.work), lambda _r: _gc(dirs[large], b.work))
    phases["gc"] = time.perf_counter() - started - sum(phases.values())
    keys = ("seconds", "objects_per_s")
    out["gc_dry_run"] = {
        "command": "attachstore gc --dry-run --grace 0s --json (every object is garbage: unheld and old)",
        str(small): _scale_sides(gs, keys) | {"objects": gs[-1]["objects"], "planned": gs[-1]["garbage"]},
        str(large): _scale_sides(gl, keys) | {"objects": gl[-1]["objects"], "planned": gl[-1]["garbage"]},
    }
    audit: dict[str, Any] = {
        "command": "attachstore audit --json, against python -m tests.bench.rawhash (walk + read + sha256 of "
        "every file under objects/, one process); both timed as whole processes, interpreter start included",
    }
    for n in (small, large):
        rounds = p.audit_rounds if n == large else max(p.audit_rounds, p.rounds)  # small: cheap
        aa, rr = alternate(
            rounds, lambda _r, n=n: _audit(dirs[n], b.work), lambda _r, n=n: _raw(dirs[n], b.work)
        )
        audit[str(n)] = {
            "audit": _scale_sides(aa, ("seconds", "mb_per_s"))
            | {"files": aa[-1]["files"], "findings": aa[-1]["findings"]},
            "raw_sha256": _scale_sides(rr, ("seconds", "mb_per_s")),
            "ratio": paired_ratio(aa, rr, "mb_per_s"),
        }
    if b.profile_dir is not None:
        audit["profile"] = _audit_profiled(b, dirs[large])
    out["audit"] = audit
    phases["audit"] = time.perf_counter() - started - sum(phases.values())
    out["phase_seconds"] = phases
    if large < 1_000_000:
        x = 1_000_000 / large
        projected = {
            "synthesis": float(made[large].get("total_s") or made[large]["first_synthesis_s"]) * x,
            "audit": audit[str(large)]["audit"]["seconds"] * x,
            "gc_dry_run": out["gc_dry_run"][str(large)]["seconds"] * x,
        }
        out["projected_1m_seconds"] = projected
        out["note"] = (
            f"the large size is {large:,} objects, not 1,000,000: at the rates measured here 1M objects "
            f"would take about {projected['synthesis']:.0f} s to synthesize, "
            f"{projected['audit']:.0f} s per audit and {projected['gc_dry_run']:.0f} s per gc --dry-run "
            "(a smaller size was asked for, or the disk has no room for a million)"
        )
    return out
