"""References: `<algorithm>:<64 lowercase hex>` (SPEC section 2), and the hashes behind them."""

from __future__ import annotations

import hashlib
import mmap
import re
import struct
from dataclasses import dataclass
from typing import Protocol

import blake3

from .errors import InvalidRef

ALGORITHMS = ("sha256", "blake3")
MAX_REF_LENGTH = 128
_REF = re.compile(r"(sha256|blake3):([0-9a-f]{64})")
_FORM = "a reference is sha256: (or blake3:) and 64 lowercase hex digits"
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_HEX = re.compile(r"[0-9a-fA-F]+")
_ALGORITHM = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


Buffer = bytes | bytearray | memoryview | mmap.mmap


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
            problem, hint = _what_is_wrong(text)
            raise InvalidRef(f"not an attachment reference: {_shorten(text)!r}: {problem}", hint=hint)
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
# What the keyed hash of a check starts with, before the fields it binds: checks of this kind and no other.
_CHECK_CONTEXT = b"attachstore keyed check 2: ref, size, media type, bytes\x00"
# And that of a link's check, over what it binds: a check of one kind never holds as one of the other.
_LINK_CONTEXT = b"attachstore link check 1: source ref, spec, variant ref\x00"
_FIELD = struct.Struct(">H")  # the length of a text field
_SIZE = struct.Struct(">Q")
_VERSION = "v2"  # checks of the bytes alone (schema 8) had none: they are not `mine`


class Checker:
    """The keyed check recorded beside a sha256 address, under a key derived from its ref, size and media
    type (docs/security.md, "The keyed check of reads")."""

    __slots__ = ("_key", "_prefix", "key_id")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a check key is {KEY_BYTES} bytes, not {len(key)}")
        self._key = key
        self.key_id = blake3.blake3(_KEY_ID_CONTEXT, key=key).hexdigest()[:16]
        self._prefix = f"{_VERSION}:{self.key_id}:"

    @property
    def key(self) -> bytes:
        return self._key

    def of(self, ref: str, size: int, media_type: str, data: Buffer) -> str:
        return self._prefix + self._hash(ref, size, media_type, data)

    def mine(self, check: str | None) -> bool:
        return check is not None and check.startswith(self._prefix)

    def holds(self, check: str, ref: str, size: int, media_type: str, data: Buffer) -> bool:
        """`check` must be one of `mine`: only the hash after its prefix is compared."""
        return self._hash(ref, size, media_type, data) == check[len(self._prefix) :]

    def link(self, source: str, spec: str, variant: str) -> str:
        return self._prefix + self._link_hash(source, spec, variant)

    def link_holds(self, check: str | None, source: str, spec: str, variant: str) -> bool:
        return (
            self.mine(check) and self._link_hash(source, spec, variant) == (check or "")[len(self._prefix) :]
        )

    def _link_hash(self, source: str, spec: str, variant: str) -> str:
        return blake3.blake3(_LINK_CONTEXT + _framed(source, spec, variant), key=self._key).hexdigest()

    def _hash(self, ref: str, size: int, media_type: str, data: Buffer) -> str:
        # A key of this object's own, derived from the fields it binds, keys the hash of its bytes: the bytes
        # are hashed in one call, as fast as a hash of them alone (a prefix in the same hash costs more:
        # docs/performance.md, "Hardening, round 3").
        own = blake3.blake3(_bound(ref, size, media_type), key=self._key).digest()
        return blake3.blake3(data, key=own).hexdigest()


def _bound(ref: str, size: int, media_type: str) -> bytes:
    return _CHECK_CONTEXT + _framed(ref) + _SIZE.pack(size) + _framed(media_type)


def _framed(*fields: str) -> bytes:
    """Each framed by its length, so that no two lists of fields run together."""
    return b"".join(_FIELD.pack(len(b)) + b for b in (f.encode() for f in fields))


def _what_is_wrong(text: str) -> tuple[str, str]:
    if not text:
        return "it is empty", _FORM
    if len(text) > MAX_REF_LENGTH:
        return f"it is {len(text):,} characters; a reference has at most {MAX_REF_LENGTH}", _FORM
    if _HEX.fullmatch(text) and len(text) == 64:
        return "it has no algorithm", f"add the algorithm: sha256:{text.lower()}"
    algorithm, colon, rest = text.partition(":")
    if not colon:
        return "it is not an algorithm, a colon and a digest", _FORM
    digest, dot, extension = rest.partition(".")
    if algorithm.lower() not in ALGORITHMS:
        if _ALGORITHM.fullmatch(algorithm):
            return f"the algorithm {algorithm!r} is unknown; it is sha256 or blake3", _FORM
        return "it does not start with sha256: or blake3:", _FORM
    if dot and _HEX.fullmatch(digest) and len(digest) == 64:
        fixed = f"{algorithm.lower()}:{digest.lower()}"
        return f"it ends in a file extension ({_shorten('.' + extension, 16)!r})", f"drop it: {fixed}"
    if not rest:
        return "it has no digest after the colon", _FORM
    if not _HEX.fullmatch(rest):
        at = next(i for i, c in enumerate(rest) if c not in _HEX_DIGITS)
        return f"the digest holds {rest[at]!r} at offset {len(algorithm) + 1 + at}, not a hex digit", _FORM
    if len(rest) != 64:
        return f"the digest has {len(rest)} hex digits, not 64", _FORM
    fixed = f"{algorithm.lower()}:{rest.lower()}"
    return "it is in upper case; a reference is lower case", f"write it in lower case: {fixed}"


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
