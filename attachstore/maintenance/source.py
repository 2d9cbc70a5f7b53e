"""The source of a migration, as one snapshot of its index, read in one transaction through a read-only
connection."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import StorageUnavailable
from ..index import BUSY_TIMEOUT_MS, COLUMNS, SCHEMA_VERSION, IndexUnusable, ObjectRow

INDEX_FILE = "index.sqlite3"


@dataclass(frozen=True, slots=True)
class HeldRef:
    ref: str
    created_at: float


@dataclass(frozen=True, slots=True)
class SourceSession:
    tenant: str
    id: str
    route: str | None
    created_at: float
    holds: tuple[HeldRef, ...]  # in the order they were made
    ttl: int | None = None  # its idle lifetime (seconds), and when it was last used
    used_at: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.id)


@dataclass(frozen=True, slots=True)
class VariantLink:
    source: str
    spec: str
    variant: str
    check: str | None  # the link's keyed check, copied as it is: it holds where the check key is the same


@dataclass(frozen=True)
class Snapshot:
    rows: dict[str, ObjectRow]  # by ref, in ref order
    grants: dict[str, list[tuple[str, str | None]]]  # ref -> (tenant, display name)
    sessions: list[SourceSession]
    variants: list[VariantLink]
    runs: dict[str, tuple[float, dict[str, float]]]

    def wanted(self, failed: Iterable[str] = ()) -> dict[str, ObjectRow]:
        skip = set(failed)
        return {ref: r for ref, r in self.rows.items() if r.state == "ok" and ref not in skip}

    def tenants(self) -> set[str]:
        return {tenant for grants in self.grants.values() for tenant, _ in grants}


def read_source(path: Path) -> Snapshot:
    try:
        db = sqlite3.connect(
            f"{path.absolute().as_uri()}?mode=ro",
            uri=True,
            isolation_level=None,
            timeout=BUSY_TIMEOUT_MS / 1000,
        )
    except sqlite3.Error as e:
        raise StorageUnavailable(f"cannot open the source index {path}: {e}") from e
    try:
        db.execute("BEGIN")
        [(version,)] = db.execute("PRAGMA user_version").fetchall()
        if version != SCHEMA_VERSION:
            upgrade = (
                "upgrade attachstore" if version > SCHEMA_VERSION else "run `attachstore gc --dry-run` on it"
            )
            raise IndexUnusable(
                f"the source index has schema version {version}, this attachstore copies version "
                f"{SCHEMA_VERSION}: {upgrade}"
            )
        rows = {r[0]: ObjectRow(*r) for r in db.execute(f"SELECT {COLUMNS} FROM objects ORDER BY ref")}
        grants: dict[str, list[tuple[str, str | None]]] = {}
        for ref, tenant, name in db.execute("SELECT ref, tenant, name FROM grants ORDER BY ref, tenant"):
            grants.setdefault(ref, []).append((tenant, name))
        holds: dict[tuple[str, str], list[HeldRef]] = {}
        for tenant, session, ref, at in db.execute(
            "SELECT tenant, session, ref, created_at FROM holds ORDER BY tenant, session, created_at, rowid"
        ):
            holds.setdefault((tenant, session), []).append(HeldRef(ref, at))
        sessions = [
            SourceSession(
                tenant,
                id,
                route,
                at,
                tuple(holds.get((tenant, id), ())),
                None if ttl is None else int(ttl),
                used,
            )
            for tenant, id, route, at, ttl, used in db.execute(
                "SELECT tenant, id, route, created_at, ttl, used_at FROM sessions ORDER BY tenant, id"
            )
        ]
        variants = [
            VariantLink(*r)
            for r in db.execute(
                "SELECT source, spec, variant, link_check FROM variants ORDER BY source, spec"
            )
        ]
        runs = {
            c: (at, json.loads(f))
            for c, at, f in db.execute("SELECT command, finished_at, figures FROM runs")
        }
        db.execute("COMMIT")
    except sqlite3.Error as e:
        raise StorageUnavailable(f"cannot read the source index {path}: {e}") from e
    finally:
        db.close()
    return Snapshot(rows, grants, sessions, variants, runs)
