"""The built-in model catalog (catalog.toml, a data file of the package) and how a model id finds its entry
(docs/configuration.md#the-built-in-catalog)."""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ..config import Provider, Route

Modality = Literal["text", "image"]
# Lower case, no spaces; a pattern is its prefix and one "*" at the end.
_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*\*?$")
# Leading segments of letters and hyphens only, each ended by a dot: Bedrock's region and vendor ("us.",
# "anthropic."). A segment with a digit ("gpt-4.", "qwen3.") is part of the name and stays.
_BEDROCK = re.compile(r"^(?:[a-z-]+\.)+")


class CatalogError(ValueError): ...


class Entry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: str | None = None
    match: str | None = None
    input_modalities: Annotated[list[Modality], Meta(min_length=1)]
    provider: Provider | None = None
    source: Annotated[str, Meta(pattern=r"^https://\S+$")]

    @property
    def key(self) -> str:
        return self.id if self.id is not None else str(self.match)

    def route(self) -> Route:
        return Route(input_modalities=list(self.input_modalities), provider=self.provider)


class _File(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    version: Annotated[str, Meta(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(\.[0-9]+)?$")]
    models: list[Entry]


@dataclass(frozen=True, slots=True)
class Match:
    entry: Entry
    matched: str  # the form of the model id that matched
    # The id named its host with a "provider/" path (OpenRouter, LiteLLM, ...): the host's protocol is not
    # the vendor's, so the entry's provider does not apply.
    hosted: bool


def forms(model: str) -> list[tuple[str, bool]]:
    """Lower-cased as it is, then canonical (docs/configuration.md#the-built-in-catalog); with each, whether a
    `provider/` path was dropped."""
    raw = model.strip().lower()
    canonical = raw.rsplit("/", 1)[-1].split(":", 1)[0]
    canonical = _BEDROCK.sub("", canonical).replace("@", "-")
    found = [(raw, False)]
    if canonical and canonical != raw:
        found.append((canonical, "/" in raw))
    return found


class Catalog:
    def __init__(self, version: str, entries: Sequence[Entry]) -> None:
        self.version = version
        self.entries = tuple(entries)
        self._ids: dict[str, Entry] = {}
        self._prefixes: dict[str, Entry] = {}
        self.routes: dict[str, Route] = {}  # by entry key
        for e in self.entries:
            _check(e)
            table, key = (self._ids, e.id) if e.id is not None else (self._prefixes, str(e.match)[:-1])
            if key in table:
                raise CatalogError(f"catalog: {e.key!r} is listed twice")
            table[key] = e
            self.routes[e.key] = e.route()
        self._longest = max(map(len, self._prefixes), default=0)
        self.digest = "sha256:" + hashlib.sha256(self.document_bytes()).hexdigest()

    @classmethod
    def parse(cls, text: str) -> Catalog:
        try:
            file = msgspec.convert(tomllib.loads(text), _File)
        except (tomllib.TOMLDecodeError, msgspec.ValidationError) as e:
            raise CatalogError(f"catalog: {e}") from None
        return cls(file.version, file.models)

    @classmethod
    def of_document(cls, document: object) -> Catalog:
        file = msgspec.convert(document, _File)
        return cls(file.version, file.models)

    def document(self) -> dict[str, object]:
        return {"version": self.version, "models": msgspec.to_builtins(list(self.entries))}

    def document_bytes(self) -> bytes:
        return msgspec.json.encode(self.document(), order="sorted")

    def lookup(self, model: str) -> Match | None:
        for form, hosted in forms(model):
            found = self._ids.get(form) or next(
                (
                    self._prefixes[form[:n]]
                    for n in range(min(len(form), self._longest), 0, -1)
                    if form[:n] in self._prefixes
                ),
                None,
            )
            if found is not None:
                return Match(found, form, hosted)
        return None


def _check(e: Entry) -> None:
    if (e.id is None) == (e.match is None):
        raise CatalogError(f"catalog: an entry needs exactly one of id and match: {e!r}")
    key = e.key
    if not _KEY.fullmatch(key) or key.endswith("*") != (e.match is not None) or key == "*":
        raise CatalogError(
            f"catalog: {key!r}: an id is lower case, without spaces; a match is a prefix and a '*' at its end"
        )
    if "text" not in e.input_modalities or len(set(e.input_modalities)) != len(e.input_modalities):
        raise CatalogError(f"catalog: {key!r}: input_modalities must list 'text', and each modality once")


@cache
def builtin() -> Catalog:
    text = resources.files(__package__).joinpath("catalog.toml").read_text(encoding="utf-8")
    return Catalog.parse(text)
