"""Totals kept in the same transactions that change what they count (schema version 12): triggers on objects,
grants, sessions, holds and variants add each change to a row of `totals` (scope, figure, shard), so that GET
/v1/stats reads a few hundred rows instead of counting a million (docs/operations.md, "Totals").

A scope is '*' (the store) or a tenant (what its grants let it see, its sessions and holds). Figures:
objects, bytes, objects:<media type>, bytes:<media type>, state:quarantined, state:missing, sessions,
held_bytes (each hold counts its object's bytes) and held_unique_bytes (each held object once): the bytes
deduplication saves is their difference. The store's scope also has variants and previews (the links).
PostgreSQL spreads each figure over shards (by server process): two nodes publishing at once never wait
for each other's row; SQLite has one writer and one shard. The triggers are written once here, in the SQL
both speak, and made into each dialect's trigger."""

from __future__ import annotations

from collections.abc import Mapping

from .dialect import Reads

STORE = "*"  # the store's scope: never a tenant's name ([A-Za-z0-9._-])
PG_SHARDS = 64
_UPSERT = """INSERT INTO totals (scope, figure, shard, value) {select}
    ON CONFLICT (scope, figure, shard) DO UPDATE SET value = totals.value + excluded.value"""


def _held_bytes(row: str) -> str:
    return f"(SELECT bytes FROM objects WHERE ref = {row}.ref)"


def _object(row: str, sign: str) -> list[str]:
    """An object comes or goes: the store's figures, and each tenant's that may see it (going)."""
    adds = [
        f"SELECT '*', 'objects', {{shard}}, {sign}1",
        f"SELECT '*', 'bytes', {{shard}}, {sign}{row}.bytes",
        f"SELECT '*', 'objects:' || {row}.media_type, {{shard}}, {sign}1",
        f"SELECT '*', 'bytes:' || {row}.media_type, {{shard}}, {sign}{row}.bytes",
        f"SELECT '*', 'state:' || {row}.state, {{shard}}, {sign}1 WHERE {row}.state <> 'ok'",
    ]
    if sign == "-":  # grants go with their object (ON DELETE CASCADE): subtracted here, while they are there
        grants = f"FROM grants WHERE grants.ref = {row}.ref"
        adds += [
            f"SELECT tenant, 'objects', {{shard}}, -1 {grants}",
            f"SELECT tenant, 'bytes', {{shard}}, -{row}.bytes {grants}",
            f"SELECT tenant, 'objects:' || {row}.media_type, {{shard}}, -1 {grants}",
            f"SELECT tenant, 'bytes:' || {row}.media_type, {{shard}}, -{row}.bytes {grants}",
            f"SELECT tenant, 'state:' || {row}.state, {{shard}}, -1 {grants} AND {row}.state <> 'ok'",
        ]
    return adds


def _state(sign: str, row: str) -> list[str]:
    changed = "OLD.state <> NEW.state"
    grants = f"FROM grants WHERE grants.ref = {row}.ref AND {changed} AND {row}.state <> 'ok'"
    return [
        f"SELECT '*', 'state:' || {row}.state, {{shard}}, {sign}1 WHERE {changed} AND {row}.state <> 'ok'",
        f"SELECT tenant, 'state:' || {row}.state, {{shard}}, {sign}1 {grants}",
    ]


def _grant() -> list[str]:
    of = "FROM objects WHERE objects.ref = NEW.ref"
    return [
        "SELECT NEW.tenant, 'objects', {shard}, 1",
        f"SELECT NEW.tenant, 'bytes', {{shard}}, bytes {of}",
        f"SELECT NEW.tenant, 'objects:' || media_type, {{shard}}, 1 {of}",
        f"SELECT NEW.tenant, 'bytes:' || media_type, {{shard}}, bytes {of}",
        f"SELECT NEW.tenant, 'state:' || state, {{shard}}, 1 {of} AND state <> 'ok'",
    ]


def _session(row: str, sign: str) -> list[str]:
    return [
        f"SELECT '*', 'sessions', {{shard}}, {sign}1",
        f"SELECT {row}.tenant, 'sessions', {{shard}}, {sign}1",
    ]


def _hold(row: str, sign: str) -> list[str]:
    """The first hold of an object (in the store, in a tenant) adds its bytes once; the last takes them
    away. After an insert the new hold is there: the others are those of other sessions."""
    b = _held_bytes(row)
    others = "" if sign == "-" else f" AND (tenant <> {row}.tenant OR session <> {row}.session)"
    mine = "" if sign == "-" else f" AND session <> {row}.session"
    alone = f"NOT EXISTS (SELECT 1 FROM holds WHERE ref = {row}.ref{others})"
    alone_here = f"NOT EXISTS (SELECT 1 FROM holds WHERE ref = {row}.ref AND tenant = {row}.tenant{mine})"
    return [
        f"SELECT '*', 'held_bytes', {{shard}}, {sign}{b}",
        f"SELECT {row}.tenant, 'held_bytes', {{shard}}, {sign}{b}",
        f"SELECT '*', 'held_unique_bytes', {{shard}}, {sign}{b} WHERE {alone}",
        f"SELECT {row}.tenant, 'held_unique_bytes', {{shard}}, {sign}{b} WHERE {alone_here}",
    ]


def _variant(row: str, sign: str) -> list[str]:
    return [
        f"SELECT '*', 'variants', {{shard}}, {sign}1",
        f"SELECT '*', 'previews', {{shard}}, {sign}1 WHERE {row}.spec LIKE 'preview/%'",
    ]


# name: (when, table, what it adds)
TRIGGERS: dict[str, tuple[str, str, list[str]]] = {
    "totals_objects_insert": ("AFTER INSERT", "objects", _object("NEW", "")),
    "totals_objects_delete": ("BEFORE DELETE", "objects", _object("OLD", "-")),
    "totals_objects_state": ("AFTER UPDATE OF state", "objects", _state("-", "OLD") + _state("", "NEW")),
    "totals_grants_insert": ("AFTER INSERT", "grants", _grant()),
    "totals_sessions_insert": ("AFTER INSERT", "sessions", _session("NEW", "")),
    "totals_sessions_delete": ("AFTER DELETE", "sessions", _session("OLD", "-")),
    "totals_holds_insert": ("AFTER INSERT", "holds", _hold("NEW", "")),
    "totals_holds_delete": ("AFTER DELETE", "holds", _hold("OLD", "-")),
    "totals_variants_insert": ("AFTER INSERT", "variants", _variant("NEW", "")),
    "totals_variants_delete": ("AFTER DELETE", "variants", _variant("OLD", "-")),
}

# What the rows already there add up to, when version 12 is applied.
_FILL = [
    "SELECT '*', 'objects', 0, count(*) FROM objects WHERE true",
    "SELECT '*', 'bytes', 0, coalesce(sum(bytes), 0) FROM objects WHERE true",
    "SELECT '*', 'objects:' || media_type, 0, count(*) FROM objects WHERE true GROUP BY media_type",
    "SELECT '*', 'bytes:' || media_type, 0, sum(bytes) FROM objects WHERE true GROUP BY media_type",
    "SELECT '*', 'state:' || state, 0, count(*) FROM objects WHERE state <> 'ok' GROUP BY state",
    "SELECT tenant, 'objects', 0, count(*) FROM grants WHERE true GROUP BY tenant",
    """SELECT tenant, 'bytes', 0, sum(bytes) FROM grants JOIN objects ON objects.ref = grants.ref
    WHERE true GROUP BY tenant""",
    """SELECT tenant, 'objects:' || media_type, 0, count(*) FROM grants
    JOIN objects ON objects.ref = grants.ref WHERE true GROUP BY tenant, media_type""",
    """SELECT tenant, 'bytes:' || media_type, 0, sum(bytes) FROM grants
    JOIN objects ON objects.ref = grants.ref WHERE true GROUP BY tenant, media_type""",
    """SELECT tenant, 'state:' || state, 0, count(*) FROM grants JOIN objects ON objects.ref = grants.ref
    WHERE state <> 'ok' GROUP BY tenant, state""",
    "SELECT '*', 'sessions', 0, count(*) FROM sessions WHERE true",
    "SELECT tenant, 'sessions', 0, count(*) FROM sessions WHERE true GROUP BY tenant",
    """SELECT '*', 'held_bytes', 0, coalesce(sum(bytes), 0) FROM holds
    JOIN objects ON objects.ref = holds.ref WHERE true""",
    """SELECT tenant, 'held_bytes', 0, sum(bytes) FROM holds JOIN objects ON objects.ref = holds.ref
    WHERE true GROUP BY tenant""",
    """SELECT '*', 'held_unique_bytes', 0, coalesce(sum(bytes), 0) FROM objects
    WHERE EXISTS (SELECT 1 FROM holds WHERE holds.ref = objects.ref)""",
    """SELECT t.tenant, 'held_unique_bytes', 0, sum(objects.bytes)
    FROM (SELECT DISTINCT tenant, ref FROM holds) AS t JOIN objects ON objects.ref = t.ref
    WHERE true GROUP BY t.tenant""",
    "SELECT '*', 'variants', 0, count(*) FROM variants WHERE true",
    "SELECT '*', 'previews', 0, count(*) FROM variants WHERE spec LIKE 'preview/%'",
]


def _statements(adds: list[str], shard: str) -> list[str]:
    return [_UPSERT.format(select=a.format(shard=shard)) for a in adds]


def sqlite_migration(table: str) -> list[str]:
    made = [table]
    for name, (when, on, adds) in TRIGGERS.items():
        body = ";\n".join(_statements(adds, "0"))
        made.append(f"CREATE TRIGGER {name} {when} ON {on} FOR EACH ROW BEGIN\n{body};\nEND")
    return made + _statements(_FILL, "0")


def pg_migration(table: str) -> list[str]:
    made = [table]
    shard = f"pg_backend_pid() % {PG_SHARDS}"
    for name, (when, on, adds) in TRIGGERS.items():
        body = ";\n".join(_statements(adds, shard))
        # What a BEFORE trigger returns goes on; NULL would cancel the change.
        back = "OLD" if when.startswith("BEFORE") else "NULL"
        made.append(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"BEGIN\n{body};\nRETURN {back};\nEND $$"
        )
        made.append(f"CREATE TRIGGER {name} {when} ON {on} FOR EACH ROW EXECUTE FUNCTION {name}()")
    return made + _statements(_FILL, "0")


async def read(db: Reads, scope: str) -> Mapping[str, int]:
    """Every figure of the scope (those never counted are absent: zero)."""
    found = await db.fetch(
        "SELECT figure, CAST(sum(value) AS bigint) FROM totals WHERE scope = $1 GROUP BY figure", scope
    )
    return {str(r[0]): int(r[1]) for r in found}
