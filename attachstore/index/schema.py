"""The index schema: one list of statements per version, applied in order, tracked in PRAGMA user_version."""

from __future__ import annotations

import aiosqlite

from ..errors import IndexUnusable
from . import totals

# One list of statements per schema version; never edit a released entry, append a new one.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE objects (
        ref         TEXT PRIMARY KEY,
        media_type  TEXT NOT NULL,
        bytes       INTEGER NOT NULL,
        width       INTEGER NOT NULL,
        height      INTEGER NOT NULL,
        frames      INTEGER NOT NULL,
        name        TEXT,
        created_at  REAL NOT NULL,
        lease_at    REAL NOT NULL,
        state       TEXT NOT NULL DEFAULT 'ok' CHECK (state IN ('ok', 'quarantined', 'missing'))
        ) STRICT""",
        "CREATE INDEX objects_lease ON objects (lease_at)",
    ],
    [
        # Sessions are scoped to a tenant ('' when the daemon runs without tokens).
        """CREATE TABLE sessions (
        tenant      TEXT NOT NULL,
        id          TEXT NOT NULL,
        route       TEXT,
        created_at  REAL NOT NULL,
        PRIMARY KEY (tenant, id)
        ) STRICT""",
        """CREATE TABLE holds (
        tenant      TEXT NOT NULL,
        session     TEXT NOT NULL,
        ref         TEXT NOT NULL REFERENCES objects (ref),
        created_at  REAL NOT NULL,
        PRIMARY KEY (tenant, session, ref),
        FOREIGN KEY (tenant, session) REFERENCES sessions (tenant, id) ON DELETE CASCADE
        ) STRICT""",
        "CREATE INDEX holds_ref ON holds (ref)",
    ],
    [
        # Which tenant may see which object: the tenants that admitted its bytes ('' without tokens).
        # A hold needs a grant first, so holds never widen what a tenant sees.
        """CREATE TABLE grants (
        tenant      TEXT NOT NULL,
        ref         TEXT NOT NULL REFERENCES objects (ref) ON DELETE CASCADE,
        PRIMARY KEY (tenant, ref)
        ) STRICT, WITHOUT ROWID""",
        "CREATE INDEX grants_ref ON grants (ref)",
        # Everything stored before tenants existed was admitted without tokens.
        "INSERT INTO grants (tenant, ref) SELECT '', ref FROM objects",
    ],
    [
        # The last run of each maintenance command, for /metrics: gc and audit run in other processes.
        """CREATE TABLE runs (
        command     TEXT PRIMARY KEY,
        finished_at REAL NOT NULL,
        figures     TEXT NOT NULL
        ) STRICT""",
    ],
    [
        # A display name belongs to whoever gave it: each tenant sees the first name it admitted bytes with,
        # never another tenant's.
        "ALTER TABLE grants ADD COLUMN name TEXT",
        "UPDATE grants SET name = (SELECT name FROM objects WHERE objects.ref = grants.ref)",
    ],
    [
        # Route-sized copies derived from a stored object (docs/normalization.md). A variant is an object
        # like any other; the link keeps it while its source lives, and goes with its source.
        """CREATE TABLE variants (
        source      TEXT NOT NULL REFERENCES objects (ref) ON DELETE CASCADE,
        spec        TEXT NOT NULL,
        variant     TEXT NOT NULL REFERENCES objects (ref),
        created_at  REAL NOT NULL,
        PRIMARY KEY (source, spec)
        ) STRICT, WITHOUT ROWID""",
        "CREATE INDEX variants_variant ON variants (variant)",
    ],
    [
        # The policy the store enforces (routes after the catalog, the limits of admission), as the last
        # daemon to start recorded it; one row, or none before any daemon ran (service/storepolicy.py).
        """CREATE TABLE policy (
        one         INTEGER PRIMARY KEY CHECK (one = 1),
        fingerprint TEXT,
        document    TEXT,
        recorded_at REAL,
        recorded_by TEXT
        ) STRICT""",
        # The daemon processes serving the store, each with its policy; seen_at is their heartbeat
        # (negative once the node stops: -(when it began to)).
        """CREATE TABLE nodes (
        node        TEXT PRIMARY KEY,
        host        TEXT NOT NULL,
        pid         INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        document    TEXT NOT NULL,
        started_at  REAL NOT NULL,
        seen_at     REAL NOT NULL
        ) STRICT""",
    ],
    [
        # The keyed check of an object's bytes beside its address (refs.Checker), which reads verify.
        "ALTER TABLE objects ADD COLUMN keyed_check TEXT",
    ],
    [
        # Checks now bind the ref, size and media type their row records, not the bytes alone (a check
        # copied from another row, with its bytes, fitted them): the old ones go. Each row is verified by its
        # address until its first verified read (or the audit) records a bound check, as after version 8.
        "UPDATE objects SET keyed_check = NULL WHERE keyed_check IS NOT NULL",
    ],
    [
        # The keyed check of a variant link (refs.Checker.link: the source, the spec and the variant),
        # recorded with the link and verified before it is followed. Links older than it have none: each is
        # derived again, and linked with a check, the first time it is wanted.
        "ALTER TABLE variants ADD COLUMN link_check TEXT",
    ],
    [
        # Sessions that end (docs/operations.md, "Session lifetimes"): an idle lifetime in seconds (NULL:
        # none), when the session was last used (made, or an admission, hold or render that named it), and
        # when it expires (used_at + ttl; NULL: never), kept in step by every change that renews it.
        "ALTER TABLE sessions ADD COLUMN ttl REAL",
        "ALTER TABLE sessions ADD COLUMN used_at REAL",
        "ALTER TABLE sessions ADD COLUMN expires_at REAL",
        "UPDATE sessions SET used_at = created_at",
        "CREATE INDEX sessions_expires ON sessions (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX sessions_used ON sessions (tenant, used_at)",
    ],
    [
        # The entry through which a tenant first admitted an object (user, tool, mcp, command; NULL:
        # before version 12); a session's images and bytes, for listings. Totals kept by triggers in the
        # transactions that change what they count, filled from the rows there (totals.py; GET /v1/stats
        # reads them); and a session's holds in the order a listing pages them, oldest first.
        "ALTER TABLE grants ADD COLUMN source TEXT",
        "ALTER TABLE sessions ADD COLUMN images INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0",
        *totals.sqlite_migration(
            """CREATE TABLE totals (
            scope       TEXT NOT NULL,
            figure      TEXT NOT NULL,
            shard       INTEGER NOT NULL,
            value       INTEGER NOT NULL,
            PRIMARY KEY (scope, figure, shard)
            ) STRICT, WITHOUT ROWID"""
        ),
        "CREATE INDEX holds_held ON holds (tenant, session, created_at, ref)",
        # A tenant's expired sessions, counted by GET /v1/stats.
        "CREATE INDEX sessions_tenant_expires ON sessions (tenant, expires_at) WHERE expires_at IS NOT NULL",
    ],
    [
        # The quarantine, a page at a time (the operator page): the few quarantined objects in ref order,
        # without walking every row of the store.
        "CREATE INDEX objects_quarantined ON objects (ref) WHERE state = 'quarantined'",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(db: aiosqlite.Connection) -> None:
    await db.execute("BEGIN IMMEDIATE")
    try:
        async with db.execute("PRAGMA user_version") as cur:
            row = await cur.fetchone()
        version = int(row[0]) if row else 0
        if version > SCHEMA_VERSION:
            raise IndexUnusable(
                f"the index has schema version {version}, newer than this attachstore knows "
                f"({SCHEMA_VERSION}); upgrade attachstore"
            )
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number]:
                await db.execute(statement)
            await db.execute(f"PRAGMA user_version = {number + 1}")
    except BaseException:
        await db.execute("ROLLBACK")
        raise
    await db.execute("COMMIT")
