"""What the provider of a model takes, for repair: per image (side, pixels, bytes, formats) and per request
(images, their base64, the body), from the model's route where it sets them, else from the provider's
published limits (docs/configuration.md, "Image limits and the providers"; docs/transcripts.md, "Repairing a
session")."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Placeholders, Provider, Route
from ..errors import InvalidRequest
from ..service import RouteTable

_MB = 1_000_000
_NONE = 1 << 40  # a limit the provider does not set


@dataclass(frozen=True, slots=True)
class Taken:
    """One provider's published limits."""

    side: int
    pixels: int
    image_bytes: int  # decoded bytes of one image
    formats: frozenset[str]
    images: int | None  # images a request
    image_base64: int  # base64 of all the images of a request
    body: int  # the request body
    many: tuple[int, int] | None = None  # past this many images a request, this side at most


_PROVIDERS: dict[str, Taken] = {
    # 8000 px, 2000 px past 20 images; 5 MB of base64 (Bedrock, Vertex), counted as 5,242,880; 32 MB a body;
    # 100 images a request on the Claude API.
    "anthropic": Taken(
        8000,
        _NONE,
        5_242_880 * 3 // 4,
        frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
        100,
        32 * _MB,
        32 * _MB,
        (20, 2000),
    ),
    # No per-image cap in the current guide (it was 20 MB); about 50 MB of images a request.
    "openai-chat": Taken(
        _NONE,
        _NONE,
        20 * _MB,
        frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
        500,
        50 * _MB,
        50 * _MB,
    ),
    # Inline data at most 20 MB for the whole request, base64 counted; 7 MB a file on Vertex AI.
    "gemini": Taken(
        _NONE,
        _NONE,
        7 * _MB,
        frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}),
        3000,
        20 * _MB,
        20 * _MB,
    ),
}
_PROVIDERS["openai-responses"] = _PROVIDERS["openai-chat"]


def published(provider: Provider) -> Taken:
    """The limits `provider` publishes, whatever a route sets."""
    return _PROVIDERS[provider]


# The provider a host's transcript speaks when the model's route names none.
HOST_PROVIDERS: dict[str, Provider] = {
    "claude": "anthropic",
    "codex": "openai-responses",
    "gemini": "gemini",
    "openai": "openai-chat",
    "mcp": "anthropic",
    "generic": "openai-chat",
}


@dataclass(frozen=True, slots=True)
class Limits:
    model: str
    provider: Provider
    vision: bool
    side: int
    pixels: int
    image_bytes: int
    formats: frozenset[str]
    images: int | None
    image_base64: int
    body: int
    many: tuple[int, int] | None
    placeholders: Placeholders

    def side_for(self, images: int) -> int:
        if self.many is not None and images > self.many[0]:
            return min(self.side, self.many[1])
        return self.side

    def summary(self) -> dict[str, object]:
        return {
            "model": self.model,
            "provider": self.provider,
            "images": self.images,
            "image_base64": self.image_base64,
            "body": self.body,
        }


def limits_for(routes: RouteTable, model: str, host: str) -> Limits:
    """The limits of `model` for a transcript of `host`: its route's where it sets them, else its provider's.
    A model neither configured nor in the catalog is refused: what it takes is unknown."""
    declared = routes.declaration(model)
    if declared is None:
        raise InvalidRequest(
            f"--for {model!r}: not a model the catalog or the configuration knows",
            hint=f"declare it: [routes.{model!r}] with input_modalities and provider (docs/configuration.md)",
        )
    route: Route = declared.route
    provider: Provider = route.provider or HOST_PROVIDERS.get(host, "openai-chat")
    taken = _PROVIDERS[provider]
    many = taken.many
    if route.many_images is not None:
        many = (route.many_images.more_than, route.many_images.max_side)
    return Limits(
        model,
        provider,
        declared.accepts_images,
        route.max_request_side or taken.side,
        route.max_request_pixels or taken.pixels,
        route.max_request_bytes or taken.image_bytes,
        taken.formats,
        route.max_request_images or taken.images,
        route.max_request_image_bytes or taken.image_base64,
        taken.body,
        many,
        route.placeholders,
    )
