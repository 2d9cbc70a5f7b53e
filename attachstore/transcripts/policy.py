"""What the scanner asks and hands over: the policy that says which strings it wants, the wanted string
(`Found`), and a string held while the policy decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

HEAD = 32  # the bytes a policy may look at before it must say whether it wants a string


@dataclass(frozen=True, slots=True)
class Found:
    """A wanted string: its content between the quotes exactly as written (`raw`), the level it is at, the
    key it is the value of, and the line it starts on. `complete` is False when it was handed over cut short:
    longer than the cap, or its line ended inside it (`reason` "cap" or "torn"); the rest of it then follows
    as plain bytes."""

    raw: bytes
    level: int
    key: bytes | None
    line: int
    complete: bool = True
    reason: str | None = None


Event = bytes | memoryview | Found


class Policy(Protocol):
    """Which strings the scanner hands over. `may_want` sees the first byte of a string (0: its first byte is
    an escape's backslash); `wanted` sees up to HEAD bytes of it (`final`: that is all of it) and answers
    True, False, or None (need more; at HEAD bytes or at the end, None means no)."""

    cap: int

    def may_want(self, first: int, level: int, key: bytes | None) -> bool: ...

    def wanted(self, head: bytes, level: int, key: bytes | None, final: bool) -> bool | None: ...


class Held:
    __slots__ = ("decided", "key", "level", "line", "parts", "size")

    def __init__(self, level: int, key: bytes | None, line: int) -> None:
        self.level = level
        self.key = key
        self.line = line
        self.parts: list[bytes] = []
        self.size = 0
        self.decided = False  # the policy wants it

    def add(self, part: bytes) -> None:
        self.parts.append(part)
        self.size += len(part)

    def raw(self) -> bytes:
        return b"".join(self.parts)

    def head(self) -> bytes:
        head = b""
        for part in self.parts:
            head += part[: HEAD - len(head)]
            if len(head) >= HEAD:
                break
        return head
