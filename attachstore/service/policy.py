"""The model-modality policy (SPEC section 6) and the text a model reads when a tool's images are dropped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config import Route
from ..errors import Rejected, RouteSwitchRejected

HARD_SOURCES = ("user", "command")  # a person is there to read the error
SOFT_SOURCES = ("tool", "mcp")  # a model is there: the tool call succeeds, the images degrade to text


def accepts_images(routes: Mapping[str, Route], route: str | None) -> bool | None:
    """True or False for a configured route; None when the route is unknown or not given."""
    if route is None or route not in routes:
        return None
    return "image" in routes[route].input_modalities


def check_modality(routes: Mapping[str, Route], route: str | None, source: str) -> None:
    """Uploads are refused only by a known text-only route; tool images need a route declaring `image`."""
    accepts = accepts_images(routes, route)
    if source in HARD_SOURCES and accepts is False:
        raise Rejected(
            "MODALITY_UNSUPPORTED",
            f"the model {route!r} does not accept images",
            hint="switch the session to a model that accepts images, then attach the image again",
        )
    if source in SOFT_SOURCES and accepts is not True:
        why = (
            f"the model {route!r} does not accept images"
            if accepts is False
            else "no model is named that accepts images"
            if route is None
            else f"the model {route!r} is not configured as accepting images"
        )
        raise Rejected(
            "MODALITY_UNSUPPORTED",
            why,
            hint="tell the user that the current model cannot see images; with a model that accepts "
            "images they can be attached",
        )


def check_session(routes: Mapping[str, Route], session: str, route: str | None) -> None:
    """Images may not enter a session whose route is known to lack `image`, whatever the request names."""
    if accepts_images(routes, route) is False:
        raise Rejected(
            "MODALITY_UNSUPPORTED",
            f"session {session!r} uses the model {route!r}, which does not accept images",
            hint="switch the session to a model that accepts images, then attach the image again",
        )


def check_switch(routes: Mapping[str, Route], session: str, holds: int, new_route: str | None) -> None:
    """A session holding images may not move to a route known to lack `image` (unknown routes are allowed)."""
    if holds and accepts_images(routes, new_route) is False:
        raise RouteSwitchRejected(
            f"session {session!r} holds {holds} image(s) and the model {new_route!r} does not accept images",
            hint="keep a model that accepts images, or start a new session for the text-only model",
        )


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """What happened to one image of a soft-rejected batch. `code` is None for a valid image that was
    dropped only because another member of its batch was rejected."""

    index: int
    media_type: str | None
    name: str | None
    code: str | None
    message: str
    hint: str | None = None


def model_text(diagnostics: Sequence[Diagnostic]) -> str:
    """One paragraph for the model: what was dropped, why, and what it can do."""
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
