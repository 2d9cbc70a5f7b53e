"""References: `<algorithm>:<64 lowercase hex>` (SPEC section 2), and the hashes behind them."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Protocol

import blake3

from .errors import InvalidRef

ALGORITHMS = ("sha256", "blake3")
MAX_REF_LENGTH = 128
_REF = re.compile(r"(sha256|blake3):([0-9a-f]{64})")


Buffer = bytes | bytearray | memoryview


class Hasher(Protocol):
    def update(self, data: Buffer, /) -> object: ...
    def hexdigest(self) -> str: ...


def hasher(algorithm: str) -> Hasher:
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "blake3":
        return blake3.blake3()
    raise ValueError(f"unknown hash algorithm {algorithm!r}")


@dataclass(frozen=True, slots=True)
class Ref:
    algorithm: str
    digest: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.digest}"

    @classmethod
    def parse(cls, text: str) -> Ref:
        """Strict: exactly one of the known algorithms and 64 lowercase hex digits, nothing around them."""
        match = _REF.fullmatch(text) if len(text) <= MAX_REF_LENGTH else None
        if match is None:
            raise InvalidRef(
                f"not an attachment reference: {_shorten(text)!r}",
                hint="a reference looks like sha256:<64 lowercase hex digits>",
            )
        return cls(match.group(1), match.group(2))

    @classmethod
    def of(cls, algorithm: str, data: Buffer) -> Ref:
        h = hasher(algorithm)
        h.update(data)
        return cls(algorithm, h.hexdigest())

    def matches(self, data: Buffer) -> bool:
        return Ref.of(self.algorithm, data) == self


KEY_BYTES = 32
_KEY_ID_CONTEXT = b"attachstore check key id"


class Checker:
    """The keyed check recorded beside a sha256 address: `<key id>:<keyed BLAKE3 of the bytes>`. It costs a
    quarter of a sha256 and, keyed with a secret kept away from the objects and the index, cannot be made
    for other bytes by someone who can write both but does not hold the key (docs/security.md). The key id
    (16 hex of a keyed hash of a fixed text) says which key made a check without telling the key."""

    __slots__ = ("_key", "_prefix", "key_id")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a check key is {KEY_BYTES} bytes, not {len(key)}")
        self._key = key
        self.key_id = blake3.blake3(_KEY_ID_CONTEXT, key=key).hexdigest()[:16]
        self._prefix = self.key_id + ":"

    def of(self, data: Buffer) -> str:
        return self._prefix + blake3.blake3(data, key=self._key).hexdigest()

    def mine(self, check: str | None) -> bool:
        """Whether `check` was made with this key (else the bytes are verified by their address)."""
        return check is not None and check.startswith(self._prefix)

    def holds(self, check: str, data: Buffer) -> bool:
        """`data` has the check `check` (one of `mine`)."""
        return blake3.blake3(data, key=self._key).hexdigest() == check[len(self._prefix) :]


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
