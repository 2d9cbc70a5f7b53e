"""What the index hands out and takes in: an object's row, a session's row, where new holds go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


class ObjectRow(NamedTuple):
    """A named tuple, not a frozen dataclass: gc, the audit and render build one per object
    (docs/performance.md, "Figures that were in the service, index and gate docstrings")."""

    ref: str
    media_type: str
    bytes: int
    width: int
    height: int
    frames: int
    name: str | None
    created_at: float
    lease_at: float
    state: str = "ok"
    # The keyed check of the bytes (refs.Checker: "<key id>:<hex>"), recorded at admission; None on rows
    # older than it until a verified read or the audit records one.
    keyed_check: str | None = None


class Link(NamedTuple):
    """`check` is the link's keyed check (refs.Checker.link), None on links older than link checks."""

    source: str
    spec: str
    row: ObjectRow
    check: str | None


class LinkRow(NamedTuple):
    source: str
    spec: str
    variant: str
    check: str | None


COLUMNS = "ref, media_type, bytes, width, height, frames, name, created_at, lease_at, state, keyed_check"

SessionKey = tuple[str, str]  # (tenant, session id)


@dataclass(frozen=True, slots=True)
class SessionRow:
    tenant: str
    id: str
    route: str | None
    created_at: float
    holds: tuple[str, ...]  # refs, in the order they were first held
    ttl: int | None = None  # the idle lifetime, in seconds; None: the session lasts until deleted
    used_at: float = 0.0  # made, or last renewed (docs/operations.md, "Session lifetimes")
    expires_at: float | None = None  # used_at + ttl: gc releases it once this has passed


@dataclass(frozen=True, slots=True)
class Hold:
    """Its check runs under the write lock (it raises to refuse)."""

    key: SessionKey
    guard: Callable[[SessionRow], object]
    everything: bool = False  # may hold any stored object (no tokens configured, or the operator)


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    fingerprint: str
    document: str  # JSON
    recorded_at: float
    recorded_by: str  # the node that recorded it


@dataclass(frozen=True, slots=True)
class NodeRow:
    node: str
    host: str  # the host (and its boot and pid namespace) the pid belongs to
    pid: int
    fingerprint: str
    document: str
    started_at: float
    seen_at: float  # negative once it stops: -(when it began to)


NODE_COLUMNS = "node, host, pid, fingerprint, document, started_at, seen_at"  # NodeRow
