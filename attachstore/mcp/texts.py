"""What the model reads beside an image the store holds, and when the store cannot answer: the same words
from the tools of `attachstore mcp` and from `attachstore mcp wrap`."""

from __future__ import annotations

from ..errors import AttachstoreError
from .backends import SentImage, Stored

# Hosts that show the model only JSON.stringify(structuredContent) when a result has it, dropping the image
# and text blocks (docs/mcp.md): Claude Code, and Codex (clientInfo.name "codex-mcp-client" and others).
DROP_CONTENT = ("claude-code",)
DROP_CONTENT_PREFIXES = ("codex",)


def described(stored: Stored, sent: SentImage, where: str = "") -> str:
    """One line: the ref (and `where` it came from), the stored image's type, size and sides, what admission
    normalized, and the size it is shown at when that is a request variant's."""
    line = (
        f"{stored.ref}{where}: {stored.media_type}, {stored.width}x{stored.height}, {stored.bytes:,} bytes."
    )
    if stored.normalized_from:
        line += f" Stored normalized; the file was {stored.normalized_from}."
    if (sent.width, sent.height) != (stored.width, stored.height):
        line += f" Shown here at {sent.width}x{sent.height}, within the model's request limits."
    return line


def failed(what: str, e: Exception) -> str:
    """`what` could not be done because the store did not answer: the daemon is not reachable, it answered
    an error (its code and message), or the data dir cannot be used (OSError, ConfigError, IndexUnusable)."""
    from ..client import ConnectionFailed  # aiohttp: not needed to answer `initialize`

    if isinstance(e, ConnectionFailed):
        return f"{what}: the attachstore daemon is not reachable ({e.message}); tell the user."
    if isinstance(e, AttachstoreError):
        hint = f" {e.hint[0].upper()}{e.hint[1:]}." if e.hint else ""
        return f"{what}: attachstore answered {e.code}: {e.message}.{hint} Tell the user."
    return f"{what}: attachstore cannot use its store: {e}. Tell the user."


def shows_structured_only(client: str) -> bool:
    """Whether the client named `client` in its `initialize` shows the model a result's structuredContent in
    place of its content blocks."""
    return client in DROP_CONTENT or client.startswith(DROP_CONTENT_PREFIXES)
