"""What a run says of each file: how its strip or restore ended, and what it found; the error that refuses
a file for now."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import AttachstoreError


class TranscriptError(AttachstoreError):
    code = "TRANSCRIPT_BUSY"


class Outcome(Protocol):
    status: str
    reason: str | None
    message: str | None
    seconds: float


@contextlib.contextmanager
def outcome(report: Outcome) -> Iterator[None]:
    """Record how one file's strip or restore ended in `report`, and how long it took: a refusal of the file
    (busy, changed, not a transcript) skips it, a result that would not restore or any other error fails it.
    The caller sets the status of a success."""
    started = time.monotonic()
    try:
        yield
    except TranscriptError as e:  # a busy file is left for later; one that would not restore is a failure
        report.status = "failed" if e.code == "TRANSCRIPT_UNVERIFIED" else "skipped"
        report.reason, report.message = e.code, e.message
    except AttachstoreError as e:
        report.status, report.reason, report.message = "failed", e.code, e.message
    except OSError as e:
        report.status, report.reason, report.message = "failed", "IO_ERROR", str(e)
    report.seconds = time.monotonic() - started


@dataclass
class Tally:
    found: int = 0  # inline images
    replaced: int = 0  # of them, now placeholders
    inline: int = 0  # of them, left inline (refused)
    already: int = 0  # placeholders of an earlier strip
    unclaimed: int = 0  # bare base64 images under another format's keys, left inline
    stored: set[str] = field(default_factory=set)
    refused: dict[str, set[bytes]] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        self.found += other.found
        self.replaced += other.replaced
        self.inline += other.inline
        self.already += other.already
        self.unclaimed += other.unclaimed
        self.stored |= other.stored
        for code, keys in other.refused.items():
            self.refused.setdefault(code, set()).update(keys)

    def refuse(self, code: str, key: bytes) -> None:
        self.inline += 1
        self.refused.setdefault(code, set()).add(key)

    def summary(self) -> dict[str, Any]:
        refused = {code: len(keys) for code, keys in sorted(self.refused.items())}
        return {
            "found": self.found,
            "distinct": len(self.stored) + len(set().union(*self.refused.values())),
            "stored": len(self.stored),
            "refused": refused,
            "replaced": self.replaced,
            "inline": self.inline,
            "already": self.already,
            "unclaimed": self.unclaimed,
        }


@dataclass
class FileReport:
    """What strip and repair say of any file they rewrite: where it went, how it ended, its bytes before and
    after."""

    path: str
    status: str
    output: str | None = None
    format: str | None = None
    session: str | None = None
    reason: str | None = None  # why it was skipped, or the code it failed with
    message: str | None = None
    bytes_before: int = 0
    bytes_after: int = 0
    sha256: str | None = None  # of the file as it was read
    sha256_after: str | None = None  # of what was written
    appended: int = 0  # bytes a host appended while the file was replaced, kept after it as they came
    seconds: float = 0.0

    def summarized(self, named: tuple[str, ...], found: dict[str, Any]) -> dict[str, Any]:
        """The summary: the file and its status, the fields `named` that are set, what the command `found`,
        then the bytes, the digests and the time."""
        out: dict[str, Any] = {"file": self.path, "status": self.status}
        out |= {key: getattr(self, key) for key in named if getattr(self, key) is not None}
        out |= found
        out["bytes"] = {"before": self.bytes_before, "after": self.bytes_after}
        if self.appended:
            out["bytes"]["appended"] = self.appended
        out["sha256"] = {"before": self.sha256, "after": self.sha256_after}
        out["seconds"] = round(self.seconds, 3)
        return out


@dataclass
class Report(FileReport):
    tally: Tally = field(default_factory=Tally)
    formats: list[str] = field(default_factory=list)  # the formats that would take its unclaimed images

    def summary(self) -> dict[str, Any]:
        found: dict[str, Any] = {"images": self.tally.summary()}
        if self.formats:
            found["formats"] = self.formats
        return self.summarized(("output", "format", "session", "reason", "message"), found)


@dataclass
class RestoreReport:
    path: str
    status: str
    output: str | None = None
    placeholders: int = 0
    refs: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    sha256: str | None = None  # of the restored text
    appended: int = 0  # bytes a host appended while the file was replaced, kept after it as they came
    reason: str | None = None
    message: str | None = None
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.path, "status": self.status}
        for key in ("output", "reason", "message"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out |= {"placeholders": self.placeholders, "refs": self.refs}
        out["bytes"] = {"before": self.bytes_before, "after": self.bytes_after}
        if self.appended:
            out["bytes"]["appended"] = self.appended
        out["sha256"] = self.sha256
        out["seconds"] = round(self.seconds, 3)
        return out
