"""The model-modality policy (SPEC section 6): what declares a model id (a configured route, else the
catalog), the checks of admissions, holds and route switches, and the text a model reads when a tool's images
are dropped."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..config import Route
from ..errors import Rejected, RouteSwitchRejected
from .catalog import Catalog

HARD_SOURCES = ("user", "command")  # a person is there to read the error
SOFT_SOURCES = ("tool", "mcp")  # a model is there: the tool call succeeds, the images degrade to text


@dataclass(frozen=True, slots=True)
class Declaration:
    route: Route  # as it applies to the id: an entry reached through a "provider/" path names no provider
    by: Literal["config", "catalog"]
    entry: str  # the configured id, or the catalog entry's id or pattern
    matched: str | None = None  # catalog: the form of the id that matched
    source: str | None = None  # catalog: where the entry's claim comes from
    replaces: str | None = None  # config: the catalog entry the id would have had

    @property
    def accepts_images(self) -> bool:
        return "image" in self.route.input_modalities

    def where(self) -> str:
        if self.by == "config":
            return f"declared by [routes.{json.dumps(self.entry)}] in the configuration"
        return f"declared by the built-in catalog, entry {self.entry!r}"


class RouteTable:
    def __init__(self, configured: Mapping[str, Route], catalog: Catalog) -> None:
        self.configured = dict(configured)
        self.catalog = catalog

    def declaration(self, model: str | None) -> Declaration | None:
        if model is None:
            return None
        if model in self.configured:
            replaced = self.catalog.lookup(model)
            return Declaration(
                self.configured[model], "config", model, replaces=replaced.entry.key if replaced else None
            )
        found = self.catalog.lookup(model)
        if found is None:
            return None
        route = self.catalog.routes[found.entry.key]
        if found.hosted and route.provider is not None:
            route = Route(input_modalities=list(route.input_modalities))
        return Declaration(route, "catalog", found.entry.key, found.matched, found.entry.source)

    def route(self, model: str | None) -> Route | None:
        found = self.declaration(model)
        return found.route if found else None

    def listing(self) -> list[Declaration]:
        configured = [d for d in map(self.declaration, sorted(self.configured)) if d is not None]
        entries = sorted(self.catalog.entries, key=lambda e: e.key)
        return configured + [
            Declaration(self.catalog.routes[e.key], "catalog", e.key, source=e.source) for e in entries
        ]


def accepts_images(routes: RouteTable, route: str | None) -> bool | None:
    """None when the model is unknown or not given."""
    found = routes.declaration(route)
    return None if found is None else found.accepts_images


def _declare(route: str) -> str:
    return f'[routes.{json.dumps(route)}] with input_modalities = ["text", "image"]'


def check_modality(routes: RouteTable, route: str | None, source: str) -> None:
    """Only a known text-only model refuses uploads; tool images need a model declared with `image`."""
    found = routes.declaration(route)
    if found is not None and found.accepts_images:
        return
    if source in HARD_SOURCES and found is not None:
        hint = "switch the session to a model that accepts images, then attach the image again"
        if found.by == "catalog":
            hint += (
                f"; if this model does accept images, declare it in the configuration: {_declare(str(route))}"
            )
        raise Rejected(
            "MODALITY_UNSUPPORTED", f"the model {route!r} does not accept images ({found.where()})", hint=hint
        )
    if source not in SOFT_SOURCES:
        return
    if found is not None:
        why = f"the model {route!r} does not accept images ({found.where()})"
        hint = (
            "tell the user that the current model cannot see images; with a model that accepts images they "
            "can be attached"
        )
    elif route is None:
        why = "no model is named for these images"
        hint = (
            "tell the user that the images were not attached because no model was named for them; the host "
            "names the model with the session's route or the admission's route"
        )
    else:
        why = (
            f"the model {route!r} is not declared as accepting images: neither the configuration nor the "
            "built-in catalog names it"
        )
        hint = (
            "tell the user that the images were not attached because attachstore does not know whether "
            f"{route!r} can see images, not because it cannot; to attach them, declare it in the attachstore "
            f"configuration: {_declare(route)}"
        )
    raise Rejected("MODALITY_UNSUPPORTED", why, hint=hint)


def check_session(routes: RouteTable, session: str, route: str | None) -> None:
    found = routes.declaration(route)
    if found is not None and not found.accepts_images:
        raise Rejected(
            "MODALITY_UNSUPPORTED",
            f"session {session!r} uses the model {route!r}, which does not accept images ({found.where()})",
            hint="switch the session to a model that accepts images, then attach the image again",
        )


def check_switch(routes: RouteTable, session: str, holds: int, new_route: str | None) -> None:
    found = routes.declaration(new_route)
    if holds and found is not None and not found.accepts_images:
        raise RouteSwitchRejected(
            f"session {session!r} holds {holds} image(s) and the model {new_route!r} does not accept images "
            f"({found.where()})",
            hint="keep a model that accepts images, or start a new session for the text-only model",
        )


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """`code` is None for a valid image dropped only because another member of its batch was rejected."""

    index: int
    media_type: str | None
    name: str | None
    code: str | None
    message: str
    hint: str | None = None


def model_text(diagnostics: Sequence[Diagnostic]) -> str:
    count = len(diagnostics)
    first = diagnostics[0]
    if count == 1:
        opening = "The tool result contained an image, but it was not attached"
    else:
        opening = f"The tool result contained {count} images, but none were attached"
    if all((d.code, d.message) == (first.code, first.message) for d in diagnostics):
        # One reason for the whole batch (the model, or the batch limits).
        return f"{opening}: {_reason(first)}"
    lines = [f"{opening}."]
    for d in diagnostics:
        label = f"Image {d.index + 1}" + (f" ({d.name})" if d.name else "")
        if d.code is None:
            lines.append(
                f"{label} was valid but was not attached, because the images of one result are attached "
                "together or not at all."
            )
        else:
            lines.append(f"{label}: {_reason(d)}")
    return " ".join(lines)


# Their hints already say the limit and the actual value; the message would say them twice.
_HINT_SAYS_ALL = ("IMAGE_TOO_LARGE", "IMAGE_DIMENSION_TOO_LARGE")


def _reason(d: Diagnostic) -> str:
    if d.hint and d.code in _HINT_SAYS_ALL:
        return f"{d.hint} ({d.code})."
    return f"{d.message} ({d.code})." + (f" {d.hint[0].upper()}{d.hint[1:]}." if d.hint else "")
