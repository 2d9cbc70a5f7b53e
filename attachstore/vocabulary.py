"""Words of the contract that the wire, the command line and the service spell alike: the sources of an
admission (SPEC section 5), the form of a session id (SPEC section 7), and what a daemon's URL is. Here,
beside the service and the client rather than in them, so that a command checks them without importing the
store or aiohttp."""

from __future__ import annotations

from yarl import URL

SOURCES = ("user", "tool", "mcp", "command")
# "." and ".." are excluded: URL handling everywhere drops them as dot segments, so no client could name them.
SESSION_ID_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$"
# A session's idle lifetime, in whole seconds: 1 second to 10 years (docs/sessions.md, "Lifetimes").
MAX_SESSION_TTL = 10 * 365 * 86400


def daemon_url(value: str, given: str) -> str:
    """`value` as the base URL of a daemon (the client's and `--url`'s): an http:// or https:// URL with a
    host, normalized, without a trailing slash. ValueError, naming where it was `given`, for anything else."""
    url = URL(value)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"{given} must be an http:// or https:// URL, not {value!r}")
    return str(url).rstrip("/")
