"""Repair's plan for one transcript, made before anything is written: its inline images found as strip finds
them, each distinct one judged for the provider (kept, fitted, or text), and the request a resume sends held
within the provider's limits, the oldest images turned to notes first (docs/transcripts.md, "Repairing a
session"). Acting on it stores the fitted images and those left out, so that the notes name their refs."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import blake3

from ..errors import Rejected
from ..gate import HeaderTooDeep, probe_header, sniff_source
from ..index import SessionKey
from ..refs import Ref
from ..service import Store, Upload
from . import inline, spans
from .digest import Digest
from .formats import Format
from .judge import Drop, Fit, Judge, Keep, Verdict
from .policy import Found
from .provider import Limits
from .repairreport import FittedImage, RepairReport, Shape, TextImage
from .restore import CHUNK
from .scanner import Scanner
from .shapes import Change, Fitted, Note

# Copies of an image a host keeps beside the one it sends (Claude Code's toolUseResult.file.base64): changed
# with it, but no request carries them.
_COPIES = {"claude": frozenset({b"base64"})}
# Where a host keeps again what it sends, in a record's member of this name: Claude Code's `toolUseResult`,
# a tool result's content once more (an MCP tool's as the same list of blocks). No request carries it.
_KEPT_AGAIN = {"claude": b"toolUseResult"}
_JUDGING = 4  # images judged at once
# What a host adds to a request that its file does not hold (its system prompt, its tools' definitions): kept
# free of images under the provider's body cap.
HOST_ADDS = 512 * 1024


@dataclass
class Image:
    data: bytes | None
    declared: str | None
    lines: list[int] = field(default_factory=list)
    sent: int = 0  # occurrences a request carries
    sent_on: dict[int, int] = field(default_factory=dict)  # of them, on each line
    verdict: Verdict | None = None
    over: bool = False  # left out to keep the request within the provider's limits
    ref: str | None = None


@dataclass
class Plan:
    images: dict[bytes, Image] = field(default_factory=dict)
    text_bytes: int = 0  # the file's bytes that are not inline images: the text a request carries, at most
    sha256: str = ""
    size: int = 0
    changes: dict[bytes, Change] = field(default_factory=dict)

    def lines(self) -> set[int]:
        return {line for key in self.changes for line in self.images[key].lines}

    def change_of(self, raw: bytes) -> Change | None:
        return self.changes.get(blake3.blake3(raw).digest()) if self.changes else None


async def scan(source: BinaryIO, fmt: Format, cap: int, report: RepairReport) -> Plan:
    plan = Plan()
    copies = _COPIES.get(fmt.name, frozenset())
    scanner = Scanner(inline.Finder(fmt.keys, cap, sources=True))
    read = Digest()
    image_bytes = 0
    while chunk := await asyncio.to_thread(source.read, CHUNK):
        read.update(chunk)
        plan.size += len(chunk)
        for event in scanner.feed(chunk):
            image_bytes += _found(plan, event, copies, report)
    for event in scanner.end():
        image_bytes += _found(plan, event, copies, report)
    plan.sha256 = read.hexdigest()
    plan.text_bytes = plan.size - image_bytes
    kept_again = _KEPT_AGAIN.get(fmt.name)
    if kept_again is not None:
        await _uncount(source, plan, kept_again, copies)
    return plan


def _found(plan: Plan, event: object, copies: frozenset[bytes], report: RepairReport) -> int:
    if not isinstance(event, Found) or event.raw.startswith(inline.SCHEME):
        return 0
    if event.level > 0 or not event.complete:
        report.left += 1
        return 0
    key = blake3.blake3(event.raw).digest()
    image = plan.images.get(key)
    if image is None:
        image = plan.images[key] = Image(*_decoded(event.raw))
    image.lines.append(event.line)
    sent = event.key not in copies
    image.sent += sent
    image.sent_on[event.line] = image.sent_on.get(event.line, 0) + sent
    return len(event.raw)


async def _uncount(source: BinaryIO, plan: Plan, member: bytes, copies: frozenset[bytes]) -> None:
    """A second reading of the lines that hold an image counted as sent: in a record that has `member`, the
    images under it are not sent. Only those lines are kept whole, one at a time."""
    wanted = {line for image in plan.images.values() for line, n in image.sent_on.items() if n}
    if not wanted:
        return
    await asyncio.to_thread(source.seek, 0)
    number = 1
    parts: list[bytes] = []
    while chunk := await asyncio.to_thread(source.read, CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if number in wanted:
                _uncount_record(b"".join([*parts, chunk[start:end]]), number, plan, member, copies)
            parts, number, start = [], number + 1, end + 1
        if number in wanted:
            parts.append(chunk[start:])
    if parts:
        _uncount_record(b"".join(parts), number, plan, member, copies)


def _uncount_record(text: bytes, line: int, plan: Plan, member: bytes, copies: frozenset[bytes]) -> None:
    if b'"' + member + b'"' not in text:
        return
    try:
        record = spans.parse(text)
    except spans.NotJson:
        return
    again = record.get(member) if record.kind == "object" else None
    for string in again.strings() if again is not None else ():
        image = plan.images.get(blake3.blake3(string.raw(text)).digest())
        if image is not None and string.key not in copies and image.sent_on.get(line, 0) > 0:
            image.sent -= 1
            image.sent_on[line] -= 1


def _decoded(raw: bytes) -> tuple[bytes | None, str | None]:
    found = inline.image(raw)
    if isinstance(found, inline.Inline):
        return found.data, found.declared
    # Not written back byte for byte, but repair writes a new image anyway: what a provider would decode.
    text = raw.replace(b"\\/", b"/")
    declared = None
    if inline.is_data_url(text):
        head, _, text = text.partition(b",")
        declared = head[5:].split(b";", 1)[0].decode("latin-1").lower()
    try:
        return base64.b64decode(text + b"=" * (-len(text) % 4)), declared
    except (binascii.Error, ValueError):
        return None, declared


async def judge(plan: Plan, judge: Judge) -> None:
    images = sum(i.sent for i in plan.images.values())
    room = asyncio.Semaphore(_JUDGING)

    async def one(image: Image) -> None:
        if image.data is None:
            image.verdict = Drop("INVALID_IMAGE_BASE64", "its base64 text does not decode")
            return
        async with room:
            image.verdict = await judge.judge(image.data, image.declared, images)

    await asyncio.gather(*(one(i) for i in plan.images.values()))


def budget(plan: Plan, limits: Limits, report: RepairReport) -> None:
    """Newest first, each image is sent while it and everything newer fit the provider's limits; from the
    first that does not, every older one is left out (as render's budget does). An image's age is its last
    line, then its first, then its place in the file: a record that writes every message again (gemini-cli's
    `$set` on a resume) holds all of them in one line, oldest first; so does a tool result of many."""
    used = count = 0
    full = False
    ages = sorted(((max(i.lines), min(i.lines), n) for n, i in enumerate(plan.images.values())), reverse=True)
    images = list(plan.images.values())
    for image in (images[n] for _, _, n in ages):
        size = _sent_size(image)
        if size is None or image.sent == 0:
            continue
        b64 = 4 * ((size + 2) // 3) * image.sent
        full = full or (
            (limits.images is not None and count + image.sent > limits.images)
            or used + b64 > limits.image_base64
            or plan.text_bytes + HOST_ADDS + used + b64 > limits.body
        )
        if full:
            image.over = True
            continue
        used += b64
        count += image.sent
    report.request.images, report.request.image_base64 = count, used
    report.request.body = plan.text_bytes + used
    report.request.limits = limits.summary()


def _sent_size(image: Image) -> int | None:
    verdict = image.verdict
    if isinstance(verdict, Fit):
        return len(verdict.data)
    if isinstance(verdict, Keep) and image.data is not None:
        return len(image.data)
    return None


async def act(
    plan: Plan,
    store: Store,
    key: SessionKey | None,
    limits: Limits,
    report: RepairReport,
    session: Callable[[], asyncio.Future[None] | asyncio.Task[None]],
) -> None:
    """Store what the notes and the fitted images name (held by the transcript's session; in a dry run
    only their refs are computed), and decide each image's change."""
    words = limits.placeholders
    for k, image in plan.images.items():
        verdict, line = image.verdict, min(image.lines)
        if isinstance(verdict, Drop):
            report.text.append(TextImage(line, verdict.code, verdict.message, None))
            text_only = verdict.code == "MODALITY_UNSUPPORTED"
            what = _what(image)
            said = words.text_only if text_only else _gone(what, limits.model, verdict)
            plan.changes[k] = Note(said, once_per_message=text_only)
            continue
        assert verdict is not None
        assert image.data is not None
        if isinstance(verdict, Keep) and not image.over:
            report.kept += 1
            continue
        stored = verdict.data if isinstance(verdict, Fit) else image.data
        image.ref = await _store(store, stored, key, session)
        if image.over:
            why = f"over the request limits of {limits.provider}"
            report.text.append(TextImage(line, "OVER_BUDGET", why, image.ref))
            plan.changes[k] = Note(_omitted(words.over_budget, image.ref))
            continue
        assert isinstance(verdict, Fit)
        after = Shape(verdict.media_type, verdict.width, verdict.height, len(verdict.data))
        before = _shape(image.data) if verdict.source is None else Shape(*verdict.source, len(image.data))
        report.fitted.append(FittedImage(line, verdict.why, before, after, image.ref))
        plan.changes[k] = Fitted(verdict.data, verdict.media_type, verdict.width, verdict.height)


async def _store(
    store: Store,
    data: bytes,
    key: SessionKey | None,
    session: Callable[[], asyncio.Future[None] | asyncio.Task[None]],
) -> str:
    if key is None:  # a dry run
        return str(Ref.of(store.config.hash, data))
    await session()
    upload = Upload.of_bytes(data)
    try:
        admitted = await store.admit([upload], "user", session=key[1], tenant=key[0], exact=True)
    except Rejected:  # a kept image past the store's own limits: a fitted copy is stored
        admitted = await store.admit([upload], "user", session=key[1], tenant=key[0])
    return admitted.attachments[0].ref


def _shape(data: bytes) -> Shape | None:
    try:
        header = probe_header(data, bounded=True)
    except HeaderTooDeep:
        return None
    if header is None:  # a HEIC, an AVIF, ...: its type, not its size
        kind = sniff_source(data)
        return None if kind is None else Shape(kind, 0, 0, len(data))
    return Shape(header.media_type, header.width, header.height, len(data))


def _what(image: Image) -> str:
    size = 0 if image.data is None else len(image.data)
    shape = None if image.data is None else _shape(image.data)
    kind = shape.media_type if shape is not None else "image"
    declared = f" declared {image.declared}" if image.declared and image.declared != kind else ""
    return f"{kind}{declared}, {size:,} bytes"


def _gone(what: str, model: str, verdict: Drop) -> str:
    return (
        f"[image removed: {what}, which {model} would refuse ({verdict.code}: {verdict.message}), and no "
        "version of it could be made; ask the user to attach it again]"
    )


def _omitted(over_budget: str, ref: str | None) -> str:
    head = over_budget.rstrip("]").split(";", 1)[0]
    return f"{head}; it is stored as {ref}: `attachstore get {ref}` writes it out]"
