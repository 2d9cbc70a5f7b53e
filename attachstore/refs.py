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


class Hasher(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...
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
    def of(cls, algorithm: str, data: bytes | bytearray) -> Ref:
        h = hasher(algorithm)
        h.update(data)
        return cls(algorithm, h.hexdigest())

    def matches(self, data: bytes | bytearray) -> bool:
        return Ref.of(self.algorithm, data) == self


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
