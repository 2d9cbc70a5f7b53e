"""What the audit reports: a typed finding per thing it found wrong, and the run's totals."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    MISSING = "missing"  # a row whose file is gone
    CORRUPT = "corrupt"  # a file whose bytes do not hash to its name
    STRAY_FILE = "stray_file"  # a file no row publishes, or whose name and place are not an object's
    STRAY_ROW = "stray_row"  # a row already marked missing or quarantined: no bytes stand behind it
    METADATA_MISMATCH = "metadata_mismatch"  # intact bytes whose header or size disagree with the row
    LINK_MISMATCH = "link_mismatch"  # a variant link whose keyed check does not hold for it


@dataclass(frozen=True)
class Finding:
    kind: Kind
    ref: str | None
    path: str | None
    detail: str
    repair: str | None = None  # what --repair did, if anything


@dataclass
class AuditReport:
    files: int = 0
    bytes: int = 0
    rows: int = 0
    sample: float = 1.0
    checks_recorded: int = 0  # rows that gained their keyed check (older than checks, or another key's)
    links: int = 0  # variant links checked
    links_unchecked: int = 0  # of which without a check of this key (derived again when next wanted)
    findings: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.findings
