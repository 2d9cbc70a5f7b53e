"""What the resume tests of every host share (test_resume_repaired.py, test_resume_codex.py,
test_resume_gemini.py): the images that poison a session, the repair command they run, the host run; and how
a Claude Code transcript is poisoned: the image its tool result holds, in every copy (the `tool_result` block
and its `toolUseResult` copy), replaced by an image the Messages API refuses, or by many images; each record
changed is written back as Claude Code writes one, and every other line is kept byte for byte."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.interop.hosts.model import Request
from tests.interop.hosts.scenario import RUN_SECONDS, Host, Place
from tests.support.images import encode, jpeg, photo, png, truncate

SOURCES = Path(__file__).parents[2] / "gate/corpus/sources"
HEIC = (SOURCES / "heic/arrow.heic").read_bytes()
AVIF = (SOURCES / "avif/kodim03_yuv420_8bpc.avif").read_bytes()  # a Kodak photo, 768x512
MAGIC = {"image/jpeg": b"\xff\xd8\xff", "image/png": b"\x89PNG\r\n\x1a\n"}


@dataclass(frozen=True)
class Poison:
    data: bytes
    refused: str  # what the Messages API says of it
    fitted: str | None  # the media type it is fitted to, or None: it becomes a note
    declared: str = "image/png"  # the media type the transcript gives it


def truncated_png() -> bytes:
    whole = encode(photo(640, 480), "PNG")
    return truncate(whole, len(whole) // 2)


def text_only(model: str, provider: str) -> str:
    """A configuration that declares `model` a text-only route of `provider`."""
    return f'[routes."{model}"]\ninput_modalities = ["text"]\nprovider = "{provider}"\n'


def host(host: Host, place: Place, *args: str) -> subprocess.CompletedProcess[str]:
    """The host's command with `args` in the project, as the harness runs it."""
    return subprocess.run(
        [str(place.bin / host.command), *args],
        cwd=place.project,
        env=place.env() | dict(host.environ(place)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def repair(place: Place, data: Path, *args: str, config: str = "") -> subprocess.CompletedProcess[str]:
    """`attachstore transcript repair ARGS`, the installed command beside this Python, with a data directory
    of the test's and no configuration but `config` (written beside it), where given."""
    command = [str(Path(sys.executable).parent / "attachstore")]
    if config:
        (data.parent / "attachstore.toml").write_text(config)
        command += ["--config", str(data.parent / "attachstore.toml")]
    return subprocess.run(
        [*command, "--data-dir", str(data), "transcript", "repair", *args],
        env=place.env(),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def conversation(requests: list[Request]) -> list[Request]:
    """The requests that carried the session's tool result (a side request, such as a title, carries none)."""
    return [r for r in requests if r.turn is not None and r.turn.results]


POISONS = {
    "heic as png": Poison(HEIC, "Image does not match the provided media type image/png", "image/jpeg"),
    "truncated png": Poison(truncated_png(), "Could not process image", None),
    # noise 9000 px tall: the fit makes it a JPEG
    "9000 px png": Poison(png(40, 9000), "exceed max allowed size: 8000 pixels", "image/jpeg"),
    # declared as what it is: a format the Messages API does not take
    "avif": Poison(AVIF, "media_type: Input should be 'image/jpeg'", "image/jpeg", "image/avif"),
}


def photos(count: int) -> list[bytes]:
    """`count` distinct JPEG photos of about 2.25 MB each (noise at quality 95, 1600x1200): under every
    per-image limit of the Messages API, and under 2000 px a side."""
    return [jpeg(1600, 1200, seed=seed, quality=95) for seed in range(1, count + 1)]


def _holds(node: dict[str, Any], old: str) -> bool:
    """Whether `node` is an image block of `old`: the base64 is its value, or its `source`'s."""
    return old in node.values() or any(isinstance(v, dict) and old in v.values() for v in node.values())


def _swap(node: Any, old: str, new: str, declared: str) -> int:
    """Every copy of the base64 `old` under `node` replaced by `new`, and the media types beside it by
    `declared`; how many copies."""
    count = 0
    if isinstance(node, dict):
        if old in node.values():
            count += 1
            for key, value in node.items():
                if value == old:
                    node[key] = new
                elif isinstance(value, str) and value.startswith("image/"):
                    node[key] = declared
        children = list(node.values())
    else:
        children = node if isinstance(node, list) else []
    return count + sum(_swap(child, old, new, declared) for child in children)


def _multiply(node: Any, old: str, instead: Sequence[str], declared: str) -> int:
    """Every image block of `old` in a list under `node` replaced by one block for each of `instead`, in
    order; how many blocks were replaced."""
    count = 0
    if isinstance(node, list):
        for i in reversed(range(len(node))):
            item = node[i]
            if isinstance(item, dict) and _holds(item, old):
                blocks = [copy.deepcopy(item) for _ in instead]
                for block, new in zip(blocks, instead, strict=True):
                    _swap(block, old, new, declared)
                node[i : i + 1] = blocks
                count += 1
            else:
                count += _multiply(item, old, instead, declared)
    elif isinstance(node, dict):
        count += sum(_multiply(child, old, instead, declared) for child in node.values())
    return count


def _rewrite(transcript: bytes, old: str, change: Any) -> tuple[bytes, int]:
    lines, count = [], 0
    for line in transcript.splitlines(keepends=True):
        if old.encode() in line:
            record = json.loads(line)
            count += change(record)
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        lines.append(line)
    return b"".join(lines), count


def poisoned(transcript: bytes, image: bytes, instead: bytes, declared: str) -> tuple[bytes, int]:
    """The transcript with every copy of `image` holding `instead` declared as `declared`; the copies
    replaced."""
    old, new = base64.b64encode(image).decode(), base64.b64encode(instead).decode()
    return _rewrite(transcript, old, lambda record: _swap(record, old, new, declared))


def multiplied(transcript: bytes, image: bytes, instead: Sequence[bytes], declared: str) -> tuple[bytes, int]:
    """The transcript with every image block of `image` replaced by one block for each of `instead`, in
    order, declared as `declared`; the blocks replaced."""
    old = base64.b64encode(image).decode()
    new = [base64.b64encode(data).decode() for data in instead]
    return _rewrite(transcript, old, lambda record: _multiply(record, old, new, declared))
