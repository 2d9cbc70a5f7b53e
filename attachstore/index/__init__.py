"""The index: a row per published object, sessions and their holds, grants, variants and maintenance runs;
in SQLite (the embedded default) or PostgreSQL (many nodes). Knows nothing of bytes, images or HTTP."""

from ..errors import IndexUnusable
from .listings import SessionEntry
from .protocol import Index
from .rows import COLUMNS, Hold, Link, NodeRow, ObjectRow, PolicyRecord, SessionKey, SessionRow
from .schema import SCHEMA_VERSION
from .sqlite import BUSY_TIMEOUT_MS, SqliteIndex, rows_in

__all__ = [
    "BUSY_TIMEOUT_MS",
    "COLUMNS",
    "SCHEMA_VERSION",
    "Hold",
    "Index",
    "IndexUnusable",
    "Link",
    "NodeRow",
    "ObjectRow",
    "PolicyRecord",
    "SessionEntry",
    "SessionKey",
    "SessionRow",
    "SqliteIndex",
    "rows_in",
]
