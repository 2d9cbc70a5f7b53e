"""The PostgreSQL schema of the index, version for version the twin of `schema.MIGRATIONS`, its version kept
in the one-row table `attachstore_schema`; `migrate` runs under an advisory lock so that daemons starting
together migrate once."""

from __future__ import annotations

from ..errors import IndexUnusable
from . import schema, totals
from .pgdriver import Connection
from .schema import SCHEMA_VERSION

# Our own advisory locks use the two-int4 key space, which never meets the bigint keys of the per-ref locks.
# Every daemon on one database must agree on these keys.
LOCK_SPACE = 0x61747374  # "atst"
MIGRATE_LOCK = 1
SWEEP_LOCK = 2

# One list of statements per schema version, aligned with schema.MIGRATIONS; never edit a released entry.
MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE objects (
        ref         text COLLATE "C" PRIMARY KEY,
        media_type  text NOT NULL,
        bytes       bigint NOT NULL,
        width       bigint NOT NULL,
        height      bigint NOT NULL,
        frames      bigint NOT NULL,
        name        text,
        created_at  double precision NOT NULL,
        lease_at    double precision NOT NULL,
        state       text NOT NULL DEFAULT 'ok' CHECK (state IN ('ok', 'quarantined', 'missing'))
        )""",
        "CREATE INDEX objects_lease ON objects (lease_at)",
    ],
    [
        """CREATE TABLE sessions (
        tenant      text NOT NULL,
        id          text NOT NULL,
        route       text,
        created_at  double precision NOT NULL,
        PRIMARY KEY (tenant, id)
        )""",
        # `seq` stands in for SQLite's rowid: the order holds were first made, among equal created_at.
        """CREATE TABLE holds (
        tenant      text NOT NULL,
        session     text NOT NULL,
        ref         text COLLATE "C" NOT NULL REFERENCES objects (ref),
        created_at  double precision NOT NULL,
        seq         bigint GENERATED ALWAYS AS IDENTITY,
        PRIMARY KEY (tenant, session, ref),
        FOREIGN KEY (tenant, session) REFERENCES sessions (tenant, id) ON DELETE CASCADE
        )""",
        "CREATE INDEX holds_ref ON holds (ref)",
    ],
    [
        """CREATE TABLE grants (
        tenant      text NOT NULL,
        ref         text COLLATE "C" NOT NULL REFERENCES objects (ref) ON DELETE CASCADE,
        PRIMARY KEY (tenant, ref)
        )""",
        "CREATE INDEX grants_ref ON grants (ref)",
        "INSERT INTO grants (tenant, ref) SELECT '', ref FROM objects",
    ],
    [
        """CREATE TABLE runs (
        command     text PRIMARY KEY,
        finished_at double precision NOT NULL,
        figures     text NOT NULL
        )""",
    ],
    [
        "ALTER TABLE grants ADD COLUMN name text",
        "UPDATE grants SET name = (SELECT name FROM objects WHERE objects.ref = grants.ref)",
    ],
    [
        """CREATE TABLE variants (
        source      text COLLATE "C" NOT NULL REFERENCES objects (ref) ON DELETE CASCADE,
        spec        text NOT NULL,
        variant     text COLLATE "C" NOT NULL REFERENCES objects (ref),
        created_at  double precision NOT NULL,
        PRIMARY KEY (source, spec)
        )""",
        "CREATE INDEX variants_variant ON variants (variant)",
    ],
    [
        """CREATE TABLE policy (
        one         integer PRIMARY KEY CHECK (one = 1),
        fingerprint text,
        document    text,
        recorded_at double precision,
        recorded_by text
        )""",
        """CREATE TABLE nodes (
        node        text PRIMARY KEY,
        host        text NOT NULL,
        pid         bigint NOT NULL,
        fingerprint text NOT NULL,
        document    text NOT NULL,
        started_at  double precision NOT NULL,
        seen_at     double precision NOT NULL
        )""",
    ],
    [
        "ALTER TABLE objects ADD COLUMN keyed_check text",
    ],
    [
        "UPDATE objects SET keyed_check = NULL WHERE keyed_check IS NOT NULL",
    ],
    [
        "ALTER TABLE variants ADD COLUMN link_check text",
    ],
    [
        "ALTER TABLE sessions ADD COLUMN ttl double precision",
        "ALTER TABLE sessions ADD COLUMN used_at double precision",
        "ALTER TABLE sessions ADD COLUMN expires_at double precision",
        "UPDATE sessions SET used_at = created_at",
        "CREATE INDEX sessions_expires ON sessions (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX sessions_used ON sessions (tenant, used_at)",
    ],
    [
        "ALTER TABLE grants ADD COLUMN source text",
        "ALTER TABLE sessions ADD COLUMN images bigint NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN bytes bigint NOT NULL DEFAULT 0",
        *totals.pg_migration(
            """CREATE TABLE totals (
            scope       text NOT NULL,
            figure      text NOT NULL,
            shard       integer NOT NULL,
            value       bigint NOT NULL,
            PRIMARY KEY (scope, figure, shard)
            )"""
        ),
        "CREATE INDEX holds_held ON holds (tenant, session, created_at, ref)",
        "CREATE INDEX sessions_tenant_expires ON sessions (tenant, expires_at) WHERE expires_at IS NOT NULL",
        # A listing's prefix is a range of session ids in the bytes' order, as in SQLite, whatever the
        # database's collation.
        'ALTER TABLE holds ALTER COLUMN session TYPE text COLLATE "C"',
        'ALTER TABLE sessions ALTER COLUMN id TYPE text COLLATE "C"',
    ],
    [
        "CREATE INDEX objects_quarantined ON objects (ref) WHERE state = 'quarantined'",
    ],
]
if len(MIGRATIONS) != len(schema.MIGRATIONS):
    raise ImportError(
        f"pgschema.MIGRATIONS has {len(MIGRATIONS)} versions, schema.MIGRATIONS {len(schema.MIGRATIONS)}: "
        "every SQLite migration needs its PostgreSQL twin"
    )


async def migrate(db: Connection) -> None:
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1, $2)", LOCK_SPACE, MIGRATE_LOCK)
        await db.execute(
            """CREATE TABLE IF NOT EXISTS attachstore_schema (
            one     boolean PRIMARY KEY DEFAULT true CHECK (one),
            version integer NOT NULL
            )"""
        )
        version = await db.fetchval("SELECT version FROM attachstore_schema")
        if version is None:
            version = 0
            await db.execute("INSERT INTO attachstore_schema (version) VALUES (0)")
        if version > SCHEMA_VERSION:
            raise IndexUnusable(
                f"the index has schema version {version}, newer than this attachstore knows "
                f"({SCHEMA_VERSION}); upgrade attachstore"
            )
        for number in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[number]:
                await db.execute(statement)
        if version != SCHEMA_VERSION:
            await db.execute("UPDATE attachstore_schema SET version = $1", SCHEMA_VERSION)
