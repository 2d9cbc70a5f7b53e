"""Repair (docs/transcripts.md, "Repairing a session"): poisoned transcripts of each host, repaired for a
model, the images its provider would refuse fitted or turned to text in the host's shape, every other byte
as it was, the request within the provider's limits; --undo gives the original back byte for byte."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from attachstore.config import Placeholders
from attachstore.service import Store
from attachstore.transcripts import Repairer, RepairOptions, RepairReport, limits_for, repairplan, undo
from attachstore.transcripts.backup import backup_path
from attachstore.transcripts.judge import Keep
from attachstore.transcripts.provider import Limits
from attachstore.transcripts.repairplan import HOST_ADDS
from tests.support.images import png
from tests.transcripts.fixtures import b64, url
from tests.transcripts.test_strip import held_open

GOOD = png(24, 16, seed=1)
HEIC = (Path(__file__).parents[1] / "gate/corpus/sources/heic/RGB_8__128x128.heif").read_bytes()
TRUNCATED = png(64, 64, seed=2)[:120]
TALL = png(9000, 40, seed=3)


def avif() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(out, "AVIF")
    return out.getvalue()


def _line(record: Any) -> bytes:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def claude(*images: tuple[bytes, str]) -> bytes:
    """A Claude Code session: a text record, then one user record per image with its toolUseResult copy."""
    out = _line({"type": "summary", "summary": "s", "leafUuid": "u-0"})
    for i, (data, declared) in enumerate(images):
        block = {"type": "image", "source": {"type": "base64", "media_type": declared, "data": b64(data)}}
        out += _line(
            {
                "parentUuid": f"u-{i}",
                "isSidechain": False,
                "type": "user",
                "message": {"role": "user", "content": [{"type": "text", "text": f"look {i}"}, block]},
                "toolUseResult": {"type": "image", "file": {"base64": b64(data), "type": declared}},
                "uuid": f"u-{i + 1}",
            }
        )
    return out


def codex(*images: tuple[bytes, str]) -> bytes:
    out = _line({"timestamp": "t", "type": "session_meta", "payload": {"id": "x"}})
    for data, declared in images:
        part = {"type": "input_image", "image_url": url(data, declared)}
        payload = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}, part]}
        out += _line({"timestamp": "t", "type": "response_item", "payload": payload})
    return out


def gemini(*images: tuple[bytes, str]) -> bytes:
    out = _line({"sessionId": "s", "projectHash": "p", "startTime": "t"})
    for i, (data, declared) in enumerate(images):
        parts = [{"text": "see"}, {"inlineData": {"mimeType": declared, "data": b64(data)}}]
        out += _line({"id": f"m{i}", "type": "user", "content": parts})
    return out


def openai(*images: tuple[bytes, str]) -> bytes:
    content: list[Any] = [{"type": "text", "text": "what is it"}]
    content += [{"type": "image_url", "image_url": {"url": url(d, t)}} for d, t in images]
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}).encode()


async def repair(store: Store, source: Path, model: str, output: Path | None, **options: Any) -> RepairReport:
    repairer = Repairer(store, lambda host: limits_for(store.routes, model, host), RepairOptions(**options))
    return await repairer.repair(source, output)


POISON = [(HEIC, "image/png"), (TRUNCATED, "image/png"), (TALL, "image/png"), (avif(), "image/avif")]


@pytest.mark.parametrize(
    ("host", "build", "name", "model"),
    [
        ("claude", claude, "s.jsonl", "claude-sonnet-4-5"),
        ("codex", codex, "rollout-2026-01-01T00-00-00-x.jsonl", "gpt-5"),
        ("gemini", gemini, "session-1.jsonl", "gemini-2.5-pro"),
        ("openai", openai, "body.json", "gpt-4o"),
    ],
)
async def test_poisoned_images_are_fitted_or_turned_to_text(
    store: Store, tmp_path: Path, host: str, build: Any, name: str, model: str
) -> None:
    source = tmp_path / name
    original = build((GOOD, "image/png"), *POISON, (GOOD, "image/png"))
    source.write_bytes(original)
    report = await repair(store, source, model, source, assume_closed=True)
    assert report.status == "repaired", report.message
    assert report.format == host
    # Only Anthropic refuses a side over 8000 px; OpenAI and Gemini scale it down themselves.
    tall_refused = host == "claude"
    assert report.kept == 1 + (not tall_refused), json.dumps(report.summary(), indent=1)
    fitted = sorted(f.why for f in report.fitted)
    expected = ["UNSUPPORTED_IMAGE_TYPE"] * 2 + ["IMAGE_DIMENSION_TOO_LARGE"] * tall_refused
    assert fitted == sorted(expected)  # the HEIC declared image/png, the AVIF, the 9000 px PNG
    for f in report.fitted:  # what each was, as decoded: its type and size, a HEIC's and an AVIF's too
        assert f.before is not None
        assert f.before.width > 0
        assert f.before.height > 0
    assert [t.code for t in report.text] == ["INVALID_IMAGE"]
    repaired = source.read_bytes()
    assert repaired.count(b64(GOOD).encode()) == original.count(b64(GOOD).encode())
    for data, _ in POISON:
        assert (b64(data).encode() in repaired) == (data is TALL and not tall_refused)
    texts = {
        b"claude": b'{"type":"text","text":"[image removed',
        b"codex": b'{"type":"input_text","text":"[image',
    }
    texts |= {b"gemini": b'{"text":"[image removed', b"openai": b'{"type": "text", "text": "[image removed'}
    if host != "openai":
        assert texts[host.encode()] in repaired
        for before, after in zip(original.splitlines(), repaired.splitlines(), strict=True):
            json.loads(after)
            changed = [d for d, _ in POISON if d is not TALL or tall_refused]
            if not any(b64(d).encode() in before for d in changed):
                assert before == after  # a record without a poisoned image is as it was
    else:
        json.loads(repaired)
    if host == "claude":  # every copy and every field describing it changed together
        for record in map(json.loads, repaired.splitlines()[1:]):
            file = record["toolUseResult"]["file"]
            blocks = [b for b in record["message"]["content"] if b["type"] == "image"]
            for block in blocks:
                assert block["source"]["data"] == file["base64"]
                assert block["source"]["media_type"] == file["type"]
                data = base64.b64decode(file["base64"])
                assert Image.open(io.BytesIO(data)).get_format_mimetype() == file["type"]
    assert backup_path(source).read_bytes() == original
    back = await undo(source, assume_closed=True)
    assert back.status == "undone", back.message
    assert source.read_bytes() == original
    assert not backup_path(source).exists()


async def test_twenty_photos_keep_the_request_within_the_limit(store: Store, tmp_path: Path) -> None:
    photos = [png(820, 820, seed=10 + i) for i in range(20)]  # about 2 MB each
    source = tmp_path / "s.jsonl"
    original = claude(*[(p, "image/png") for p in photos])
    source.write_bytes(original)
    report = await repair(store, source, "claude-sonnet-4-5", source, assume_closed=True)
    request = report.request
    assert request.image_base64 <= request.limits["image_base64"]
    assert request.body <= request.limits["body"]
    over = [t for t in report.text if t.code == "OVER_BUDGET"]
    assert over, report.summary()
    assert all(t.ref is not None for t in over)
    lines = source.read_bytes().splitlines()
    # The oldest go first: the newest image is still there, the oldest is a note naming its ref.
    assert b64(photos[-1]).encode() in lines[-1]
    assert over[0].ref is not None
    assert over[0].ref.encode() in lines[1]
    assert b64(photos[0]).encode() not in lines[1]


async def test_of_the_images_in_one_record_the_first_go_first(store: Store, tmp_path: Path) -> None:
    photos = [png(820, 820, seed=40 + i) for i in range(16)]  # about 2 MB each, all in one tool result
    blocks = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(p)}}
        for p in photos
    ]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": blocks}
    message = {"role": "user", "content": [result]}
    record = {"parentUuid": "u-0", "isSidechain": False, "type": "user", "message": message, "uuid": "u-1"}
    source = tmp_path / "s.jsonl"
    source.write_bytes(claude() + _line(record))
    report = await repair(store, source, "claude-sonnet-4-5", source, assume_closed=True)
    over = [t for t in report.text if t.code == "OVER_BUDGET"]
    assert 0 < len(over) < len(photos), report.summary()
    content = json.loads(source.read_bytes().splitlines()[-1])["message"]["content"][0]["content"]
    kinds = [block["type"] for block in content]
    assert kinds == ["text"] * len(over) + ["image"] * (len(photos) - len(over))
    assert content[-1]["source"]["data"] == b64(photos[-1])


async def test_a_tool_results_copy_in_tool_use_result_is_not_counted_as_sent(
    store: Store, tmp_path: Path
) -> None:
    """Claude Code keeps an MCP tool result's blocks again in the record's `toolUseResult`, with the same
    `data` key: no request carries that copy, so the request has room for the images counted once."""
    photos = [png(820, 820, seed=60 + i) for i in range(16)]  # about 2 MB each, 43 MB of base64 in all
    blocks = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(p)}}
        for p in photos
    ]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": blocks}
    message = {"role": "user", "content": [result]}
    record = {"type": "user", "message": message, "uuid": "u-1", "toolUseResult": blocks}
    source = tmp_path / "s.jsonl"
    source.write_bytes(claude() + _line(record))
    report = await repair(store, source, "claude-sonnet-4-5", source, assume_closed=True)
    kept = len(photos) - len([t for t in report.text if t.code == "OVER_BUDGET"])
    assert report.request.images == kept, report.summary()  # each counted once
    assert report.request.image_base64 == sum(len(b64(p)) for p in photos[-kept:])
    assert kept == 11, report.summary()  # 11 of about 2.7 MB fit 32 MB; counted twice, 5 would
    repaired = json.loads(source.read_bytes().splitlines()[-1])
    sent = repaired["message"]["content"][0]["content"]
    assert repaired["toolUseResult"] == sent  # the copy changed with it


async def test_images_a_resume_wrote_again_keep_their_age(store: Store, tmp_path: Path) -> None:
    """gemini-cli writes every message again (a `$set` record) when it resumes a chat, so every image's
    last line is the same: the newest is still the one that came last, and the oldest goes first."""
    photos = [png(820, 820, seed=30 + i) for i in range(20)]
    source = tmp_path / "session-1.jsonl"
    chat = gemini(*[(p, "image/png") for p in photos])
    parts = [{"inlineData": {"mimeType": "image/png", "data": b64(p)}} for p in photos]
    chat += _line({"$set": {"messages": [{"id": "m", "type": "user", "content": parts}]}})
    source.write_bytes(chat)
    report = await repair(store, source, "gemini-2.5-pro", source, assume_closed=True)
    assert report.request.body <= report.request.limits["body"]
    over = {t.ref for t in report.text if t.code == "OVER_BUDGET"}
    assert over, report.summary()
    repaired = source.read_bytes()
    assert b64(photos[-1]).encode() in repaired
    assert b64(photos[0]).encode() not in repaired


async def test_a_text_only_model_gets_one_note_a_message(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-2026-01-01T00-00-00-x.jsonl"
    part = {"type": "input_image", "image_url": url(GOOD, "image/png")}
    other = {"type": "input_image", "image_url": url(png(8, 8, seed=4), "image/png")}
    payload = {"type": "message", "role": "user", "content": [part, other]}
    source.write_bytes(_line({"timestamp": "t", "type": "response_item", "payload": payload}))
    report = await repair(store, source, "gpt-4o-audio-preview", source, assume_closed=True)
    assert {t.code for t in report.text} == {"MODALITY_UNSUPPORTED"}
    record = json.loads(source.read_bytes())
    content = record["payload"]["content"]
    assert content == [{"type": "input_text", "text": "[image omitted: this model does not accept images]"}]


async def test_a_dry_run_writes_nothing(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    original = claude((HEIC, "image/png"))
    source.write_bytes(original)
    report = await repair(store, source, "claude-sonnet-4-5", None, dry_run=True)
    assert report.status == "dry-run"
    assert len(report.fitted) == 1
    assert report.bytes_after != report.bytes_before
    assert source.read_bytes() == original
    assert sorted(os.listdir(tmp_path)) == ["data", "s.jsonl"]  # the store, the file


async def test_valid_images_leave_the_file_alone(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    source.write_bytes(claude((GOOD, "image/png")))
    report = await repair(store, source, "claude-sonnet-4-5", source, assume_closed=True)
    assert report.status == "unchanged"
    assert not backup_path(source).exists()


async def test_a_file_the_host_writes_is_left_alone(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "rollout-2026-01-01T00-00-00-x.jsonl"
    original = codex((HEIC, "image/png"))
    source.write_bytes(original)
    with held_open(source):
        report = await repair(store, source, "gpt-5", source)
    assert (report.status, report.reason) == ("skipped", "TRANSCRIPT_BUSY")
    assert source.read_bytes() == original
    assert not backup_path(source).exists()


async def test_backup_dir_and_undo(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    original = claude((TRUNCATED, "image/png"))
    source.write_bytes(original)
    keep = tmp_path / "originals"
    report = await repair(store, source, "claude-sonnet-4-5", source, assume_closed=True, backup_dir=keep)
    assert report.status == "repaired"
    assert [p.name.endswith(".attachstore-original") for p in keep.iterdir()] == [True]
    assert (await undo(source, backup_dir=keep, assume_closed=True)).status == "undone"
    assert source.read_bytes() == original


@pytest.mark.parametrize(("room", "sent"), [(HOST_ADDS - 1, False), (HOST_ADDS, True)])
def test_the_body_keeps_room_for_what_the_host_adds(room: int, sent: bool) -> None:
    """The body cap is checked with HOST_ADDS kept for the host's system prompt and tools, which the
    transcript does not hold: an image that fits only without that room is left out."""
    image = repairplan.Image(b"\x00" * 300, "image/png", lines=[2], sent=1, verdict=Keep("image/png", 1, 1))
    plan = repairplan.Plan(images={b"k": image}, text_bytes=1000)
    body = plan.text_bytes + 400 + room  # 400: the image's base64
    limits = Limits(
        "m", "anthropic", True, 8000, 1 << 40, 1 << 30, frozenset(), 100, body, body, None, Placeholders()
    )
    repairplan.budget(plan, limits, RepairReport("s.jsonl", "repaired"))
    assert image.over is not sent
