"""A gemini-cli session poisoned by an image the Gemini API refuses, repaired, and resumed in the real host
(docs/transcripts.md, "Repairing a session"): the session is made by `gemini -p` against a fake Gemini model
that refuses what the API refuses; the image its tool result holds (twice in gemini-cli's JSONL chat: in the
model message's `toolCalls[].result` and in the user message that answers it) is replaced in the host's own
file. `gemini --resume` is refused, until `attachstore transcript repair` fits the image (or turns it into a
note where none can be made), after which the resumed request is accepted and carries the fitted image;
`--undo` gives the poisoned file back byte for byte.

What gemini-cli 0.61.0 does that the test depends on:
- it keeps a chat as `~/.gemini/tmp/<project's folder name>/chats/session-<time>-<id8>.jsonl`: a header
  record (`sessionId`, `projectHash`), then one record a message and `{"$set": ...}` records; a resume
  appends a new header and a `$set` of every message;
- a resumed request sends the tool result twice: once from the model message's `toolCalls` and once from the
  user message, each with its `inlineData` part;
- a 400 is not retried: the run ends with exit code 1 and the API's message on stderr, and the chat is left as
  it was but for the resume's own records (no message removes the image)."""

from __future__ import annotations

import base64
import functools
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from attachstore.transcripts.provider import published
from tests.interop.hosts.gemini import HOST, MODEL, Gemini, refused_by_gemini
from tests.interop.hosts.model import FakeModel, Say, Script, Step
from tests.interop.hosts.poisons import (
    AVIF,
    HEIC,
    MAGIC,
    conversation,
    host,
    poisoned,
    repair,
    text_only,
    truncated_png,
)
from tests.interop.hosts.scenario import ONE_READ, TOKEN, Place, explain, last, run
from tests.support.images import encode, opened, photo

TEXT_ONLY = "gemma-3-1b-it"  # declared text-only in the repair's configuration
CONFIG = text_only(TEXT_ONLY, "gemini")


@dataclass(frozen=True)
class Poison:
    data: bytes
    declared: str  # the mimeType the transcript gives it
    refused: str  # what the Gemini API says of it
    fitted: str | None  # the media type the repair fits it to, or None: it becomes a note
    model: str = MODEL  # the model the session resumes with
    note: str = "[image removed"  # how the note that takes its place begins, where it becomes one


POISONS = {
    "truncated png": Poison(truncated_png(), "image/png", "Unable to process input image", None),
    "avif": Poison(AVIF, "image/avif", "Unsupported MIME type: image/avif", "image/jpeg"),
    # Gemini takes HEIC, but not declared as PNG; the store's fit makes a JPEG of it
    "heic as png": Poison(HEIC, "image/png", "Provided image is not valid.", "image/jpeg"),
    "text-only model": Poison(
        encode(photo(640, 480), "JPEG"),
        "image/jpeg",
        f"Image input modality is not enabled for models/{TEXT_ONLY}",
        None,
        TEXT_ONLY,
        "[image omitted: this model does not accept images]",
    ),
}
# A 9000 px screenshot is not a poison here: the Gemini API sets no limit on a side (it scales an image to its
# own tiles), and so neither does the fake model nor the repair for a Gemini model.


def chat(place: Place) -> Path:
    [path] = (place.home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl")
    return path


def resume(place: Place, session: str, model: str) -> subprocess.CompletedProcess[str]:
    """`gemini -p "go on" -m MODEL --resume SESSION` in the project, as the harness runs the host."""
    return host(HOST, place, "-p", "go on", "-m", model, "--resume", session)


@pytest.mark.parametrize("name", POISONS)
def test_a_poisoned_session_is_refused_until_repaired_then_resumes(
    name: str, hosts: Path, store: str, tmp_path: Path
) -> None:
    bad = POISONS[name]
    refuse = functools.partial(refused_by_gemini, text_only=frozenset({TEXT_ONLY}))
    with FakeModel(Gemini(refuse), ONE_READ) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        first = run(HOST, place, "Look at photo.jpg here with read_image.")
        why = explain(first, model)
        assert first.returncode == 0, why
        path = chat(place)
        session = json.loads(path.read_bytes().split(b"\n", 1)[0])["sessionId"]
        [shown] = last(model, 1).results[0].images
        poison, copies = poisoned(path.read_bytes(), shown.data, bad.data, bad.declared)
        assert copies == 2, why  # toolCalls[].result and the user message
        path.write_bytes(poison)

        # Before repair: the resumed request carries the image as declared, and is refused; gemini-cli does
        # not retry a 400, and fails.
        start = len(model.requests)
        refused_run = resume(place, session, bad.model)
        why = explain(refused_run, model)
        assert refused_run.returncode == 1, why
        assert bad.refused in refused_run.stderr, why
        [refused] = conversation(model.requests[start:])
        assert refused.reply is None, why
        sent_bad = {i for r in refused.turn.results for i in r.images} if refused.turn else set()
        assert {(i.media_type, i.data) for i in sent_bad} == {(bad.declared, bad.data)}, why
        before = path.read_bytes()  # the poisoned chat, with what the refused resume wrote into it
        assert base64.b64encode(bad.data) in before, why

        # Repair for the model the session resumes with.
        data = tmp_path / "repair-data"
        done = repair(place, data, str(path), "--for", bad.model, "--in-place", "--json", config=CONFIG)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        [report] = json.loads(done.stdout)["files"]
        assert (report["status"], report["format"], report["images"]["kept"]) == ("repaired", "gemini", 0)
        assert base64.b64encode(bad.data) not in path.read_bytes()

        # After repair: the resumed request is accepted, and carries the fitted image or the note.
        start = len(model.requests)
        accepted = resume(place, session, bad.model)
        why = explain(accepted, model) + "\n--- report ---\n" + json.dumps(report)
        assert accepted.returncode == 0, why
        sent = conversation(model.requests[start:])
        assert sent, why
        assert all(r.reply is not None for r in sent), why
        assert sent[-1].reply == Say(Script.FINAL), why
        results = sent[-1].turn.results if sent[-1].turn else ()
        assert results, why
        if bad.fitted is None:
            assert report["images"]["fitted"] == [], why
            assert report["images"]["text"], why
            assert all(r.images == () for r in results), why
            notes = [  # every text part but the session's context
                p["text"]
                for c in sent[-1].body["contents"]
                for p in c["parts"]
                if "text" in p and "session_context" not in p["text"]
            ]
            assert any(n.startswith(bad.note) for n in notes), f"{why}\n{notes}"
        else:
            fits = report["images"]["fitted"]
            assert fits, why
            to = fits[0]["to"]
            images = {i for r in results for i in r.images}
            [fitted] = images
            assert fitted.media_type == to["media_type"] == bad.fitted, why
            assert fitted.data.startswith(MAGIC[bad.fitted]), why
            assert opened(fitted.data).size == (to["width"], to["height"]), why

    # --undo: the poisoned file back, byte for byte.
    undone = repair(place, data, "--undo", str(path))
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == before


PHOTOS = 20


def test_twenty_photos_over_the_inline_cap_resume_once_the_oldest_are_notes(
    hosts: Path, store: str, tmp_path: Path
) -> None:
    """Twenty photos of about 2 MB each in one session: the resumed request (each image sent twice) is far
    over the Gemini API's 20 MB cap and refused; after repair the oldest images are notes naming their refs,
    the newest are kept as they were, and the request fits."""
    names = [f"photo{i:02}.jpg" for i in range(PHOTOS)]
    script = Script([Step("read_image", {"path": name}) for name in names])
    with FakeModel(Gemini(refused_by_gemini), script) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        for i, name in enumerate(names):
            (place.project / name).write_bytes(encode(photo(320, 240, seed=i), "JPEG"))
        first = run(HOST, place, "Look at each photoNN.jpg here with read_image.")
        why = explain(first, model)
        assert first.returncode == 0, why
        path = chat(place)
        session = json.loads(path.read_bytes().split(b"\n", 1)[0])["sessionId"]
        shown = [r.images[0] for r in last(model, PHOTOS).results]
        poison = path.read_bytes()
        big = [encode(photo(2800, 2100, seed=i), "JPEG", quality=95) for i in range(PHOTOS)]
        for image, instead in zip(shown, big, strict=True):
            poison, copies = poisoned(poison, image.data, instead, "image/jpeg")
            assert copies == 2, why
        assert sum(len(b) for b in big) > published("gemini").body, why
        path.write_bytes(poison)

        start = len(model.requests)
        refused_run = resume(place, session, MODEL)
        why = explain(refused_run, model)
        assert refused_run.returncode == 1, why
        assert "Request payload size exceeds the limit" in refused_run.stderr, why
        [refused] = conversation(model.requests[start:])
        assert refused.reply is None, why

        data = tmp_path / "repair-data"
        before = path.read_bytes()  # the poisoned chat, with what the refused resume wrote into it
        done = repair(place, data, str(path), "--for", MODEL, "--in-place", "--json")
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        [report] = json.loads(done.stdout)["files"]
        assert report["status"] == "repaired", report
        assert report["request"]["body"] <= report["request"]["limits"]["body"], report
        notes = report["images"]["text"]
        assert notes, report
        assert report["images"]["kept"] == 1, report  # the newest: twice 2.8 MB of base64 a photo

        start = len(model.requests)
        accepted = resume(place, session, MODEL)
        why = explain(accepted, model) + "\n--- report ---\n" + json.dumps(report)
        assert accepted.returncode == 0, why
        sent = conversation(model.requests[start:])
        assert sent, why
        assert all(r.reply is not None for r in sent), why
        assert sent[-1].reply == Say(Script.FINAL), why
        carried = {i.data for r in sent[-1].turn.results for i in r.images} if sent[-1].turn else set()
        # the newest photo as it was; every older one a note naming the ref it was stored under
        assert carried == {big[-1]}, why
        texts = json.dumps(sent[-1].body["contents"])
        assert all(note["ref"] in texts for note in notes), why

    undone = repair(place, data, "--undo", str(path))
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == before
