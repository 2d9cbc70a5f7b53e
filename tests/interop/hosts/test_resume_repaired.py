"""A Claude Code session poisoned by an image the provider refuses, repaired, and resumed in the real host
(docs/transcripts.md, "Repairing a session"): the session is made by `claude -p` against a fake Anthropic
model that refuses what the Messages API refuses; the image its tool result holds is replaced in the host's
own transcript by a HEIC declared `image/png`, a truncated PNG, or a PNG 9000 px tall. `claude --resume` is
refused, until `attachstore transcript repair` fits the image (or turns it into a note where none can be
made), after which the resumed request is accepted and carries the fitted image; `--undo` gives the poisoned
file back byte for byte."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.interop.hosts.claude import HOST, Messages, refused_by_anthropic
from tests.interop.hosts.model import FakeModel, Request, Say, Script
from tests.interop.hosts.scenario import ONE_READ, RUN_SECONDS, TOKEN, Place, explain, last, run
from tests.support.images import encode, opened, photo, png, truncate

HEIC = (Path(__file__).parents[2] / "gate/corpus/sources/heic/arrow.heic").read_bytes()
MODEL = "claude-sonnet-4-5"
MAGIC = {"image/jpeg": b"\xff\xd8\xff", "image/png": b"\x89PNG\r\n\x1a\n"}


@dataclass(frozen=True)
class Poison:
    data: bytes
    refused: str  # what the Messages API says of it
    fitted: str | None  # the media type it is fitted to, or None: it becomes a note


def _truncated() -> bytes:
    whole = encode(photo(640, 480), "PNG")
    return truncate(whole, len(whole) // 2)


POISONS = {
    "heic as png": Poison(HEIC, "Image does not match the provided media type image/png", "image/jpeg"),
    "truncated png": Poison(_truncated(), "Could not process image", None),
    # noise 9000 px tall: the fit makes it a JPEG
    "9000 px png": Poison(png(40, 9000), "exceed max allowed size: 8000 pixels", "image/jpeg"),
}


def _poison(node: Any, old: str, new: str, declared: str) -> int:
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
    return count + sum(_poison(child, old, new, declared) for child in children)


def poisoned(transcript: bytes, image: bytes, instead: bytes, declared: str) -> tuple[bytes, int]:
    """The transcript with every copy of `image` (in the tool result and its `toolUseResult` copy) holding
    `instead` declared as `declared`, written back as Claude Code writes a record; the copies replaced."""
    old, new = base64.b64encode(image).decode(), base64.b64encode(instead).decode()
    lines, count = [], 0
    for line in transcript.splitlines(keepends=True):
        if old.encode() in line:
            record = json.loads(line)
            count += _poison(record, old, new, declared)
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        lines.append(line)
    return b"".join(lines), count


def resume(place: Place, session: str, *more: str) -> subprocess.CompletedProcess[str]:
    """`claude -p "go on" --resume SESSION` in the project, as the harness runs the host."""
    args = [*HOST.args(place, "go on"), "--resume", session, *more]
    return subprocess.run(
        [str(place.bin / HOST.command), *args],
        cwd=place.project,
        env=place.env() | dict(HOST.environ(place)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def attachstore(place: Place, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed command beside this Python, with a data directory of the test's and no configuration."""
    command = Path(sys.executable).parent / "attachstore"
    return subprocess.run(
        [str(command), "--data-dir", str(data), "transcript", "repair", *args],
        env=place.env(),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def conversation(requests: list[Request]) -> list[Request]:
    """The requests that carried the session's tool result (a side request, such as a title, carries none)."""
    return [r for r in requests if r.turn is not None and r.turn.results]


@pytest.mark.parametrize("name", POISONS)
def test_a_poisoned_session_is_refused_until_repaired_then_resumes(
    name: str, hosts: Path, store: str, tmp_path: Path
) -> None:
    bad = POISONS[name]
    with FakeModel(Messages(refused_by_anthropic), ONE_READ) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        first = run(HOST, place, "Look at photo.jpg here with read_image.")
        why = explain(first, model)
        assert first.returncode == 0, why
        session = json.loads(first.stdout)["session_id"]
        [path] = (place.home / ".claude" / "projects").glob(f"*/{session}.jsonl")
        [shown] = last(model, 1).results[0].images
        poison, copies = poisoned(path.read_bytes(), shown.data, bad.data, "image/png")
        assert copies >= 1, why
        path.write_bytes(poison)

        # Before repair: the resumed request carries the image as image/png, and is refused. Claude Code
        # 2.1.332 then sends it again without the image ("[Image removed: ...]") and writes into the session
        # that the image was removed, so that no later resume sends it: the model never sees the picture.
        # This resume forks (a session of its own), so that the poisoned one is repaired as it was.
        start = len(model.requests)
        dropped = resume(place, session, "--fork-session")
        why = explain(dropped, model)
        assert dropped.returncode == 0, why
        refused, *retried = conversation(model.requests[start:])
        assert refused.reply is None, why  # answered 400, as the Messages API refuses it
        reason = refused_by_anthropic(refused.body)
        assert reason is not None, why
        assert bad.refused in reason, why
        [sent_bad] = refused.turn.results[0].images if refused.turn else ()
        assert (sent_bad.media_type, sent_bad.data) == ("image/png", bad.data), why
        assert retried, why
        [lost] = retried[-1].turn.results[:1] if retried[-1].turn else ()
        assert lost.images == (), why
        assert "[Image removed" in lost.text, why
        assert path.read_bytes() == poison, why

        # Repair for the model the session resumes with.
        data = tmp_path / "repair-data"
        done = attachstore(place, data, str(path), "--for", MODEL, "--in-place", "--json")
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        [report] = json.loads(done.stdout)["files"]
        assert (report["status"], report["format"], report["images"]["kept"]) == ("repaired", "claude", 0)
        assert base64.b64encode(bad.data) not in path.read_bytes()

        # After repair: the resumed request is accepted, and carries the fitted image or the note.
        start = len(model.requests)
        accepted = resume(place, session)
        why = explain(accepted, model)
        assert accepted.returncode == 0, why
        sent = conversation(model.requests[start:])
        assert sent, why
        assert all(r.reply is not None for r in sent), why  # none refused
        assert sent[-1].reply == Say(Script.FINAL), why
        [result] = sent[-1].turn.results[:1] if sent[-1].turn else ()
        if bad.fitted is None:
            [note] = report["images"]["text"]
            assert (note["code"], report["images"]["fitted"]) == ("INVALID_IMAGE", []), why
            assert result.images == (), why
            assert "[image removed" in result.text, why  # the repair's note, not Claude Code's
        else:
            [fit] = report["images"]["fitted"]
            assert fit["to"]["media_type"] == bad.fitted, why
            [fitted] = result.images
            assert fitted.media_type == bad.fitted, why
            assert fitted.data.startswith(MAGIC[bad.fitted]), why
            decoded = opened(fitted.data)
            assert decoded.size == (fit["to"]["width"], fit["to"]["height"]), why
            assert max(decoded.size) <= 8000, why

    # --undo: the poisoned file back, byte for byte.
    undone = attachstore(place, data, "--undo", str(path))
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == poison
