"""The transcript scenario: a synthetic Codex rollout (1 GB, 2,000 inline images of which 200 are distinct)
stripped and then restored by the real command (`attachstore transcript`, a process of its own), against the
floor of reading the file and hashing every image once. Reports the time ratios, the bytes before and after,
and the peak memory of each command (its process and its decode workers)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import random
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from .procs import REPO, MemorySampler, attachstore_command
from .stats import alternate, paired_ratio, summary

_READ = 1 << 20


@dataclass(frozen=True)
class Size:
    images: int
    distinct: int
    side: int  # of the square noise PNGs: 353 gives ~375 KB, ~500 KB of base64


def size(quick: bool) -> Size:
    return Size(40, 8, 48) if quick else Size(2000, 200, 353)


def _pngs(n: int, side: int) -> list[bytes]:
    """Seeded noise: as incompressible as screenshots of photos are in the worst case."""
    out = []
    for seed in range(n):
        rng = random.Random(seed)
        im = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
        buffer = io.BytesIO()
        im.save(buffer, "PNG", compress_level=1)
        out.append(buffer.getvalue())
    return out


def _forms() -> list[tuple[str, str, bool]]:
    """Four of Codex's lines with an image, split where the image goes: (before, after, as a data URL)."""
    mark = "@IMAGE@"
    payloads: list[tuple[str, dict[str, Any], bool]] = [
        (
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [{"type": "input_image", "image_url": mark}],
            },
            True,
        ),
        (
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "screenshot: what changed?"},
                    {"type": "input_image", "image_url": mark, "detail": "high"},
                ],
            },
            True,
        ),
        (
            "event_msg",
            {
                "type": "mcp_tool_call_end",
                "call_id": "call_2",
                "result": {"Ok": {"content": [{"data": mark, "mimeType": "image/png", "type": "image"}]}},
            },
            False,
        ),
        (
            "event_msg",
            {"type": "user_message", "message": "look", "images": [mark], "local_images": []},
            True,
        ),
    ]
    out = []
    for kind, payload, url in payloads:
        record = {"timestamp": "2026-08-20T10:00:01.456Z", "type": kind, "payload": payload}
        before, after = json.dumps(record, separators=(",", ":")).split(mark)
        out.append((before, after, url))
    return out


def synthesize(path: Path, s: Size) -> list[tuple[int, int]]:
    """Write the rollout; returns where each image's base64 text is (offset, length). The images come in four
    of Codex's forms, a distinct one every seventh step, each line followed by an agent message."""
    texts = [base64.b64encode(p) for p in _pngs(s.distinct, s.side)]
    forms = [(before.encode(), after.encode(), url) for before, after, url in _forms()]
    note = {
        "timestamp": "2026-08-20T10:00:02.000Z",
        "type": "event_msg",
        "payload": {"type": "agent_message", "message": "The dialog moved to the left. " * 40},
    }
    tail = b"\n" + json.dumps(note, separators=(",", ":")).encode() + b"\n"
    spans: list[tuple[int, int]] = []
    offset = 0
    with open(path, "wb") as f:
        for i in range(s.images):
            before, after, url = forms[i % 4]
            b64 = texts[(i * 7) % s.distinct]
            head = before + (b"data:image/png;base64," if url else b"")
            spans.append((offset + len(head), len(b64)))
            f.write(head)
            f.write(b64)
            f.write(after + tail)
            offset += len(head) + len(b64) + len(after) + len(tail)
    return spans


def floor(path: Path, spans: list[tuple[int, int]]) -> dict[str, Any]:
    """Read the whole file, sha256 each image's text once: what no strip can do in less."""
    started = time.perf_counter()
    queue = iter(spans)
    start, length = next(queue)
    h = hashlib.sha256()
    pos = 0
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            end = pos + len(chunk)
            view = memoryview(chunk)
            while start < end:
                lo, hi = max(start, pos), min(start + length, end)
                h.update(view[lo - pos : hi - pos])
                if start + length > end:
                    break
                h.digest()
                h = hashlib.sha256()
                start, length = next(queue, (1 << 62, 0))
            pos = end
    return {"seconds": time.perf_counter() - started}


def _command(args: list[str], out: Path) -> dict[str, Any]:
    """One `attachstore transcript ...` process, timed, with the peak memory of its tree."""
    started = time.perf_counter()
    with open(out, "wb") as stdout:
        proc = subprocess.Popen([*attachstore_command(), "transcript", *args], stdout=stdout, cwd=REPO)
        with MemorySampler(proc.pid) as mem:
            code = proc.wait(timeout=3600)
    seconds = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"attachstore transcript {args[0]}: exit {code}")
    main_hwm = mem.hwm.get(proc.pid, 0)
    return {
        "seconds": seconds,
        "peak_rss_mb": main_hwm / 1e6,
        "peak_rss_tree_mb": mem.hwm_sum / 1e6,
        "summary": json.loads(out.read_bytes())["total"],
    }


def transcript(work: Path, quick: bool, rounds: int) -> dict[str, Any]:
    s = size(quick)
    base = work / "transcript"
    base.mkdir(parents=True, exist_ok=True)
    short = fits(base, quick)
    if short is not None:
        raise RuntimeError(f"transcript: no room for the rollout and its copies: {short}")
    source = base / "rollout-2026-08-20T10-00-00-bench.jsonl"
    started = time.perf_counter()
    spans = synthesize(source, s)
    made = time.perf_counter() - started
    original = _sha256(source)
    stripped, restored = base / "stripped.jsonl", base / "restored.jsonl"

    def strip(r: int) -> dict[str, Any]:
        data = base / f"data-{r}"  # a new store each round: every distinct image is admitted again
        shutil.rmtree(data, ignore_errors=True)
        args = ["strip", "--data-dir", str(data), str(source), "-o", str(stripped), "--json"]
        result = _command(args, base / f"strip-{r}.json")
        args = ["restore", "--data-dir", str(data), str(stripped), "-o", str(restored), "--json"]
        result["restore"] = _command(args, base / f"restore-{r}.json")
        if _sha256(restored) != original:
            raise RuntimeError("transcript: the restored rollout differs from the original")
        restored.unlink()
        return result

    a, f = alternate(rounds, strip, lambda _r: floor(source, spans))
    restore = [x["restore"] for x in a]
    images = a[-1]["summary"]["images"]
    if (images["found"], images["stored"]) != (s.images, s.distinct):
        raise RuntimeError(f"transcript: expected {s.images} images, {s.distinct} stored, got {images}")
    before, after = source.stat().st_size, stripped.stat().st_size
    return {
        "workload": (
            f"a synthetic Codex rollout of {before / 1e9:.2f} GB: {s.images} inline PNGs "
            f"({s.distinct} distinct, "
            f"{s.side}x{s.side} noise) as input_image data URLs, MCP results and user_message images, "
            "each line followed by an agent message; `attachstore transcript strip FILE -o OUT` then "
            "`restore OUT -o BACK` as processes, a new store each round; BACK is checked to be the original"
        ),
        "floor": "in-process: read the whole file in 1 MiB chunks and sha256 each image's base64 text once",
        "images": s.images,
        "distinct": s.distinct,
        "bytes_before": before,
        "bytes_after": after,
        "synthesis_seconds": made,
        "strip": _sides(a, ("seconds", "peak_rss_mb", "peak_rss_tree_mb")),
        "restore": _sides(restore, ("seconds", "peak_rss_mb", "peak_rss_tree_mb")),
        "floor_seconds": summary(f, ("seconds",))["seconds"],
        "strip_ratio": paired_ratio(a, f, "seconds"),
        "restore_ratio": paired_ratio(restore, f, "seconds"),
    }


def _sides(samples: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    out = summary(samples, keys)
    out.pop("errors", None)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_READ):
            h.update(chunk)
    return h.hexdigest()


def fits(work: Path, quick: bool) -> str | None:
    """Why the scenario cannot run here (no room for the rollout, its stripped and restored copies)."""
    need = 0.1e9 if quick else 2.5e9
    free = shutil.disk_usage(work).free
    return None if free > need else f"{free / 1e9:.1f} GB free, {need / 1e9:.1f} GB needed"
