"""Words of the contract that the wire, the command line and the service spell alike: the sources of an
admission (SPEC section 5) and the form of a session id (SPEC section 7). Here, beside the service rather than
in it, so that a command checks them without importing the store."""

from __future__ import annotations

SOURCES = ("user", "tool", "mcp", "command")
# "." and ".." are excluded: URL handling everywhere drops them as dot segments, so no client could name them.
SESSION_ID_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$"
