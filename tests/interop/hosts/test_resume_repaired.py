"""A Claude Code session poisoned by an image the provider refuses, repaired, and resumed in the real host
(docs/transcripts.md, "Repairing a session"): the session is made by `claude -p` against a fake Anthropic
model that refuses what the Messages API refuses; the image its tool result holds is replaced in the host's
own transcript (poisons.py) by a HEIC declared `image/png`, a truncated PNG, a PNG 9000 px tall or an AVIF,
or by twenty photos of about 2 MB (a body over the 32 MB cap); or the session is resumed with a text-only
model. `claude --resume` is refused, until `attachstore transcript repair` fits the image (or turns it into a
note where none can be made, the oldest photos into notes naming their refs, every image of a message for a
text-only model into one note), after which the resumed request is accepted and carries the fitted images;
`--undo` gives the poisoned file back byte for byte."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from tests.interop.hosts.claude import HOST, MAX_BODY, Messages, refused_by_anthropic, refused_for_text_only
from tests.interop.hosts.model import FakeModel, Say, Script
from tests.interop.hosts.poisons import (
    MAGIC,
    POISONS,
    conversation,
    host,
    multiplied,
    photos,
    poisoned,
    repair,
    text_only,
)
from tests.interop.hosts.scenario import ONE_READ, REF, TOKEN, Place, explain, last, run
from tests.support.images import opened

MODEL = "claude-sonnet-4-5"
TEXT_ONLY = "claude-text-only-1"  # a text-only route, declared in the repair's configuration
TEXT_ONLY_NOTE = "[image omitted: this model does not accept images]"  # its text_only placeholder


def resume(place: Place, session: str, *more: str) -> subprocess.CompletedProcess[str]:
    """`claude -p "go on" --resume SESSION` in the project, as the harness runs the host."""
    return host(HOST, place, *HOST.args(place, "go on"), "--resume", session, *more)


def session(place: Place) -> tuple[str, Path, bytes]:
    """A real session of Claude Code that read photo.jpg with read_image: its id, its transcript, and the
    image its tool result holds."""
    first = run(HOST, place, "Look at photo.jpg here with read_image.")
    assert first.returncode == 0, explain(first, place.model)
    sid = json.loads(first.stdout)["session_id"]
    [path] = (place.home / ".claude" / "projects").glob(f"*/{sid}.jsonl")
    [shown] = last(place.model, 1).results[0].images
    return sid, path, shown.data


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
        poison, copies = poisoned(path.read_bytes(), shown.data, bad.data, bad.declared)
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
        assert (sent_bad.media_type, sent_bad.data) == (bad.declared, bad.data), why
        assert retried, why
        [lost] = retried[-1].turn.results[:1] if retried[-1].turn else ()
        assert lost.images == (), why
        assert "[Image removed" in lost.text, why
        assert path.read_bytes() == poison, why

        # Repair for the model the session resumes with.
        data = tmp_path / "repair-data"
        done = repair(place, data, str(path), "--for", MODEL, "--in-place", "--json")
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
    undone = repair(place, data, "--undo", str(path))
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == poison


def test_twenty_photos_over_the_body_cap_are_refused_until_the_oldest_are_notes(
    hosts: Path, store: str, tmp_path: Path
) -> None:
    twenty = photos(20)
    with FakeModel(Messages(refused_by_anthropic), ONE_READ) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        sid, path, shown = session(place)
        poison, blocks = multiplied(path.read_bytes(), shown, twenty, "image/jpeg")
        assert blocks >= 1
        path.write_bytes(poison)

        # Before repair: the resumed request is a body of about 60 MB, answered 413. Claude Code 2.1.332 does
        # not retry it without an image as it does after a 400: it compacts the conversation, asking for a
        # summary with the images (413 again), then with each replaced by "[image]", and goes on from the
        # summary: the model sees none of the photos, and the script begins again (it reads photo.jpg anew).
        start = len(model.requests)
        compacted = resume(place, sid, "--fork-session")
        why = explain(compacted, model)
        assert compacted.returncode == 0, why
        sent = conversation(model.requests[start:])
        full = [r for r in sent if r.turn and len(r.turn.results[0].images) == len(twenty)]
        assert len(full) >= 1, why
        for r in full:
            assert r.reply is None, why  # answered 413
            assert refused_by_anthropic(r.body) is None, why  # no image of it refused: the body's size
            assert len(json.dumps(r.body)) > MAX_BODY, why
        after = sent[len(full) :]
        assert sent[: len(full)] == full, why
        assert after, why
        [summary] = after[0].turn.results[:1] if after[0].turn else ()
        assert summary.images == (), why
        assert summary.text.count("[image]") == len(twenty), why
        assert all(i.data not in twenty for r in after if r.turn for x in r.turn.results for i in x.images), (
            why
        )
        assert path.read_bytes() == poison, why

        data = tmp_path / "repair-data"
        done = repair(place, data, str(path), "--for", MODEL, "--in-place", "--json")
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        [report] = json.loads(done.stdout)["files"]
        assert (report["status"], report["images"]["fitted"]) == ("repaired", []), why
        notes = report["images"]["text"]
        kept = report["images"]["kept"]
        assert {n["code"] for n in notes} == {"OVER_BUDGET"}, why
        assert 0 < kept < len(twenty), why
        assert kept + len(notes) == len(twenty), why
        assert report["request"]["images"] == kept, why  # counted once: the toolUseResult copy is not sent
        assert report["request"]["body"] <= MAX_BODY, why

        # After repair: accepted, under the cap; the newest photos are there byte for byte, the oldest are
        # notes naming the refs they are stored under, in the order they were.
        start = len(model.requests)
        accepted = resume(place, sid)
        why = explain(accepted, model)
        assert accepted.returncode == 0, why
        sent = conversation(model.requests[start:])
        assert sent, why
        assert all(r.reply is not None for r in sent), why
        assert sent[-1].reply == Say(Script.FINAL), why
        assert len(json.dumps(sent[-1].body)) <= MAX_BODY, why
        [result] = sent[-1].turn.results[:1] if sent[-1].turn else ()
        assert [i.data for i in result.images] == twenty[len(notes) :], why
        said = [line for line in result.text.splitlines() if line.startswith("[image omitted")]
        named = [found.group(0) for line in said if (found := REF.search(line))]
        assert named == [n["ref"] for n in notes], why
        assert all(f"attachstore get {n['ref']}" in result.text for n in notes), why

    undone = repair(place, data, "--undo", str(path))
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == poison


def test_a_session_switched_to_a_text_only_model_resumes_with_one_note_a_message(
    hosts: Path, store: str, tmp_path: Path
) -> None:
    config = text_only(TEXT_ONLY, "anthropic")
    with FakeModel(Messages(refused_for_text_only({TEXT_ONLY})), ONE_READ) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        sid, path, shown = session(place)
        # The tool result holds three valid images (the photo read, and two more), made for a vision model.
        three = [shown, *photos(2)]
        held, blocks = multiplied(path.read_bytes(), shown, three, "image/jpeg")
        assert blocks >= 1
        path.write_bytes(held)

        # Before repair: resumed with the text-only model, the request is refused for its first image, and
        # Claude Code sends it again with every image "[Image removed: ...]", as after any 400 naming one.
        start = len(model.requests)
        dropped = resume(place, sid, "--fork-session", "--model", TEXT_ONLY)
        why = explain(dropped, model)
        assert dropped.returncode == 0, why
        refused, *retried = conversation(model.requests[start:])
        assert (refused.reply, refused.body["model"]) == (None, TEXT_ONLY), why
        [lost] = retried[-1].turn.results[:1] if retried and retried[-1].turn else ()
        assert (lost.images, retried[-1].reply) == ((), Say(Script.FINAL)), why
        assert lost.text.count("[Image removed") == len(three), why
        reason = refused_for_text_only({TEXT_ONLY})(refused.body)
        assert reason is not None, why
        assert "does not support image input" in reason, why
        [carried] = refused.turn.results[:1] if refused.turn else ()
        assert [i.data for i in carried.images] == three, why
        assert path.read_bytes() == held, why

        data = tmp_path / "repair-data"
        done = repair(place, data, str(path), "--for", TEXT_ONLY, "--in-place", "--json", config=config)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        [report] = json.loads(done.stdout)["files"]
        assert (report["status"], report["images"]["kept"], report["images"]["fitted"]) == ("repaired", 0, [])
        assert [n["code"] for n in report["images"]["text"]] == ["MODALITY_UNSUPPORTED"] * len(three)

        # After repair: accepted for the text-only model; the message's three images are one note.
        start = len(model.requests)
        accepted = resume(place, sid, "--model", TEXT_ONLY)
        why = explain(accepted, model)
        assert accepted.returncode == 0, why
        sent = [r for r in conversation(model.requests[start:]) if r.body.get("model") == TEXT_ONLY]
        assert sent, why
        assert all(r.reply is not None for r in sent), why
        assert sent[-1].reply == Say(Script.FINAL), why
        [result] = sent[-1].turn.results[:1] if sent[-1].turn else ()
        assert result.images == (), why
        assert result.text.count(TEXT_ONLY_NOTE) == 1, why
        assert "[Image removed" not in result.text, why

    undone = repair(place, data, "--undo", str(path), config=config)
    assert undone.returncode == 0, f"{undone.stdout}\n{undone.stderr}"
    assert path.read_bytes() == held
