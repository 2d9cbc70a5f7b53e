"""A Codex session poisoned by an image, repaired, and resumed in the real host (docs/transcripts.md,
"Repairing a session"): the session is made by `codex exec` against a fake OpenAI Responses model that refuses
what OpenAI refuses; the image its rollout holds (the `input_image` data URL of the tool result's
`function_call_output`) is replaced by a HEIC declared `image/png`, a truncated PNG or an AVIF, or the
session is resumed with a text-only model. `attachstore transcript repair` fits the image (or turns it into a
note where none can be made), after which `codex exec resume` sends the fitted image, or the note, and is
answered; `--undo` gives back the file as it was before the repair, byte for byte.

What Codex 0.171.0 does with a poisoned rollout on resume, before any repair:
- it decodes every image it is about to send, and one it cannot decode (the HEIC, the truncated PNG, the
  AVIF) is not sent: the tool result carries "image content omitted because it could not be processed"
  instead, on every resume, while the rollout keeps the image. The request is accepted, the model never sees
  the picture; after repair it sees the fitted one;
- an image for a model that takes none, where Codex does not know the model (fallback metadata, which takes
  images), is sent: OpenAI refuses the request with a 400, and `codex exec` reports the error as the turn's
  failure and exits 1, without retrying and without changing the image in the rollout.

Two of the poisons the issue names are left out for Codex, because Codex fits them itself before sending:
- a PNG 9000 px tall is scaled down by Codex (to 53,988 bytes here) and sent; OpenAI sets no side limit
  either, so nothing refuses it and repair keeps it;
- a 2 MB photo (3000x2000) is re-encoded by Codex to about 0.5 MB before sending, so twenty of them make a
  body of about 13 MB, under OpenAI's 50 MB cap: no request is refused.
Codex scales down, the same way, a fitted image with more pixels than it sends."""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.interop.hosts.codex import HOST, MODEL, Responses, openai_refusals
from tests.interop.hosts.model import FakeModel, Say, Script
from tests.interop.hosts.poisons import (
    AVIF,
    HEIC,
    MAGIC,
    conversation,
    host,
    repair,
    text_only,
    truncated_png,
)
from tests.interop.hosts.scenario import ONE_READ, PHOTO, TOKEN, Place, explain, last
from tests.support.images import opened

TEXT_ONLY = "gpt-text-only"  # a model declared text-only to attachstore, and refused images by the fake
CONFIG = text_only(TEXT_ONLY, "openai-responses")
OMITTED = "image content omitted because it could not be processed"  # Codex's words for what it drops
REFUSED = "Invalid content type. image_url is only supported by certain models."


@dataclass(frozen=True)
class Poison:
    data: bytes
    declared: str  # the media type its data URL declares
    model: str  # the model the session resumes with, and is repaired for
    fitted: str | None  # the media type it is fitted to, or None: it becomes a note
    note: str | None = None  # the code the report gives the note


POISONS = {
    "heic as png": Poison(HEIC, "image/png", MODEL, "image/jpeg"),
    "truncated png": Poison(truncated_png(), "image/png", MODEL, None, "INVALID_IMAGE"),
    "avif": Poison(AVIF, "image/avif", MODEL, "image/jpeg"),
    "text-only model": Poison(PHOTO, "image/jpeg", TEXT_ONLY, None, "MODALITY_UNSUPPORTED"),
}


def _url(media_type: str, data: bytes) -> bytes:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}".encode()


def poisoned(rollout: bytes, image: bytes, instead: bytes, declared: str) -> tuple[bytes, int]:
    """The rollout with every data URL of `image` holding `instead` declared as `declared`, every other byte
    as Codex wrote it (the data URL is a JSON string that needs no escaping); the copies replaced. The
    McpToolCall event beside it keeps a preview of the tool's JSON, cut short: no image Codex sends."""
    old = _url("image/jpeg", image)
    return rollout.replace(old, _url(declared, instead)), rollout.count(old)


def codex(place: Place, *args: str) -> subprocess.CompletedProcess[str]:
    """`codex exec ARGS` in the project, as the harness runs the host, with the events as JSON lines; the
    session is kept (no `--ephemeral`), so that it can be resumed."""
    command = ["exec", "--strict-config", "--skip-git-repo-check", "--color", "never", "--json"]
    return host(HOST, place, *command, *args)


def resume(place: Place, session: str, model: str) -> subprocess.CompletedProcess[str]:
    return codex(place, "resume", "-m", model, session, "go on")


def events(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("name", POISONS)
def test_a_poisoned_codex_session_resumes_with_its_images_once_repaired(
    name: str, hosts: Path, store: str, tmp_path: Path
) -> None:
    bad = POISONS[name]
    with FakeModel(Responses(openai_refusals(text_only=(TEXT_ONLY,))), ONE_READ) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        HOST.configure(place)
        first = codex(place, "Look at photo.jpg here with read_image.")
        why = explain(first, model)
        assert first.returncode == 0, why
        [session] = [e["thread_id"] for e in events(first) if e.get("type") == "thread.started"]
        [path] = (place.home / ".codex" / "sessions").glob(f"*/*/*/rollout-*-{session}.jsonl")
        [shown] = last(model, 1).results[0].images
        assert (shown.media_type, shown.data) == ("image/jpeg", PHOTO), why
        poison, copies = poisoned(path.read_bytes(), shown.data, bad.data, bad.declared)
        assert copies == 1, why
        path.write_bytes(poison)

        # Before repair.
        start = len(model.requests)
        before = resume(place, session, bad.model)
        why = explain(before, model)
        [sent_bad] = conversation(model.requests[start:])
        [result] = sent_bad.turn.results if sent_bad.turn else ()
        if bad.model == TEXT_ONLY:
            # Sent, and refused: the turn fails, `codex exec` exits 1, and nothing is retried.
            assert before.returncode == 1, why
            assert sent_bad.reply is None, why
            assert [(i.media_type, i.data) for i in result.images] == [("image/jpeg", PHOTO)], why
            [failed] = [e for e in events(before) if e.get("type") == "turn.failed"]
            assert REFUSED in json.dumps(failed), why
        else:
            # Codex cannot decode it: it sends the tool result without it, and the model is answered.
            assert before.returncode == 0, why
            assert sent_bad.reply == Say(Script.FINAL), why
            assert result.images == (), why
            assert OMITTED in result.text, why
        assert _url(bad.declared, bad.data) in path.read_bytes(), why  # the rollout still holds it
        resumed = path.read_bytes()

        # Repair for the model the session resumes with.
        data = tmp_path / "repair-data"
        done = repair(place, data, str(path), "--for", bad.model, "--in-place", "--json", config=CONFIG)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        [report] = json.loads(done.stdout)["files"]
        assert (report["status"], report["format"], report["images"]["kept"]) == ("repaired", "codex", 0), (
            done.stdout
        )
        assert base64.b64encode(bad.data) not in path.read_bytes()

        # After repair: the resumed request is accepted, and carries the fitted image or the note.
        start = len(model.requests)
        accepted = resume(place, session, bad.model)
        why = explain(accepted, model) + f"\n--- report ---\n{done.stdout}"
        assert accepted.returncode == 0, why
        sent = conversation(model.requests[start:])
        assert sent, why
        assert all(r.reply is not None for r in sent), why  # none refused
        assert sent[-1].reply == Say(Script.FINAL), why
        [result] = sent[-1].turn.results if sent[-1].turn else ()
        assert OMITTED not in result.text, why
        if bad.fitted is None:
            [note] = report["images"]["text"]
            assert (note["code"], report["images"]["fitted"]) == (bad.note, []), why
            assert result.images == (), why
            assert "[image" in result.text, why  # the repair's note
        else:
            [fit] = report["images"]["fitted"]
            assert fit["to"]["media_type"] == bad.fitted, why
            [fitted] = result.images
            assert fitted.media_type == bad.fitted, why
            assert fitted.data.startswith(MAGIC[bad.fitted]), why
            # Codex sends it as it is, or scaled down where it has more pixels than Codex sends (the HEIC's
            # 1500x2000 went as 1367x1823): the fitted picture either way.
            width, height = opened(fitted.data).size
            wide, high = fit["to"]["width"], fit["to"]["height"]
            assert width <= wide, why
            assert height <= high, why
            assert abs(width * high - height * wide) <= max(wide, high), why  # the same proportions

    # --undo: the file back as the repair found it, byte for byte.
    undone = repair(place, data, "--undo", str(path), config=CONFIG)
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == resumed
