"""The MCP server: the tools read_image and read_attachment, and every image the session holds as a resource
`attachstore://<alg>/<hex>` (docs/mcp.md). Built on the SDK's low-level `Server`, which leaves every field
of a result to us and validates nothing: the arguments are checked here, and a bad file, a refused image
or a store that cannot answer is a tool error (`isError`) whose text the model reads, never a protocol
error."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import mcp.types as types
import pybase64
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from .. import __version__
from ..config import Limits
from ..errors import AttachstoreError, ConfigError, IndexUnusable, InvalidRef, NotFound, Rejected
from ..refs import Ref
from .backends import Backend, SentImage, Stored
from .files import TooLarge, Unreadable, read_inside, shown
from .roots import Roots
from .texts import described, failed, shows_structured_only

log = logging.getLogger(__name__)

Structured = Literal["auto", "always", "never"]
SCHEME = "attachstore://"
PAGE = 100  # resources/list

INSTRUCTIONS = (
    "read_image shows you an image file from the workspace (PNG, JPEG, GIF or WebP): it is checked, stored "
    "in attachstore and returned with its reference (sha256:...). read_attachment shows an image again by "
    "that reference. When an image cannot be shown, the result says why and what to do instead."
)

_METADATA = {
    "ref": {"type": "string", "description": "the stored image's reference"},
    "media_type": {"type": "string"},
    "bytes": {"type": "integer", "description": "the stored image's size"},
    "width": {"type": "integer"},
    "height": {"type": "integer"},
    "path": {"type": "string", "description": "the file read, resolved"},
}
_SAFE = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)


def _read_image(structured: bool) -> types.Tool:
    return types.Tool(
        name="read_image",
        title="Read an image file",
        description=(
            "Look at an image file from the workspace (PNG, JPEG, GIF or WebP; the bytes decide the type, "
            "not the extension). The image is stored and returned with its reference, type, size and "
            "path. When it cannot be shown (not an image, damaged, too large, or a model that does not "
            "accept images), the result is an error that says why and what to do instead."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file, relative to the workspace or absolute"}
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        output_schema={"type": "object", "properties": _METADATA, "required": list(_METADATA)}
        if structured
        else None,
        annotations=_SAFE,
    )


READ_ATTACHMENT = types.Tool(
    name="read_attachment",
    title="Look at a stored image again",
    description=(
        "Look again at an image stored earlier, by its reference (for example the sha256:... that a "
        "read_image result named)."
    ),
    input_schema={
        "type": "object",
        "properties": {"ref": {"type": "string", "description": "sha256:<64 hex digits> or blake3:<64 hex>"}},
        "required": ["ref"],
        "additionalProperties": False,
    },
    annotations=_SAFE,
)
TEMPLATE = types.ResourceTemplate(
    name="attachment",
    title="A stored image",
    uri_template=SCHEME + "{alg}/{hex}",
    description="An image attachstore holds, by its reference sha256:<hex> (or blake3:<hex>)",
)


@dataclass(frozen=True, slots=True)
class Options:
    structured: Structured = "auto"  # structuredContent on read_image results: by the client, or always/never
    resource_links: bool = False  # a resource_link block beside the image (several hosts fail on one)


def refusal(text: str) -> types.CallToolResult:
    """A tool error for the model: text only, no structuredContent (a client checks that against the
    output schema, and some do so even on an error)."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def uri_of(ref: str) -> str:
    return SCHEME + ref.replace(":", "/", 1)


def ref_of(uri: str) -> Ref | None:
    if not uri.startswith(SCHEME):
        return None
    alg, _, hex = uri[len(SCHEME) :].partition("/")
    try:
        return Ref.parse(f"{alg}:{hex}")
    except AttachstoreError:
        return None


def too_large(size: int, bound: int, name: str) -> str:
    # Imported here: the gate and the service (Pillow, the store) are not needed to answer `initialize`.
    from .. import gate
    from ..service import Diagnostic, model_text

    try:
        gate.precheck(size, b"", None, Limits(max_image_bytes=bound))
    except Rejected as e:
        return model_text([Diagnostic(0, None, name, e.code, e.message, e.hint)])
    raise AssertionError(f"{size} bytes is within {bound}")  # pragma: no cover - only called when over


def _structured(ctx: ServerRequestContext[Any, Any], mode: Structured) -> bool:
    if mode != "auto":
        return mode == "always"
    client = ctx.session.client_params
    name = client.client_info.name if client is not None else ""
    return not shows_structured_only(name)


def _text(stored: Stored, path: Path | None, sent: SentImage) -> str:
    where = f" from {path}" if path is not None else ""
    again = f' Look at it again with read_attachment {{"ref": "{stored.ref}"}}.'
    return described(stored, sent, where) + again


class Tools:
    def __init__(self, backend: Backend, roots: Roots, options: Options) -> None:
        self.backend = backend
        self.roots = roots
        self.options = options

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[_read_image(_structured(ctx, self.options.structured)), READ_ATTACHMENT]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        tools: dict[str, Callable[..., Awaitable[types.CallToolResult | types.InputRequiredResult]]] = {
            "read_image": self.read_image,
            "read_attachment": self.read_attachment,
        }
        tool = tools.get(params.name)
        if tool is None:  # the SDK passes on calls of tools it never listed
            return refusal(f"there is no tool {params.name!r}; the tools are read_image and read_attachment")
        arguments = params.arguments or {}
        key = "path" if params.name == "read_image" else "ref"
        value = arguments.get(key)
        if set(arguments) - {key} or not isinstance(value, str) or not value:
            return refusal(f'{params.name} takes one argument, {{"{key}": "<a non-empty string>"}}')
        try:
            return await tool(ctx, params, value)
        except (AttachstoreError, OSError, ConfigError, IndexUnusable) as e:  # the store did not answer
            return refusal(failed(params.name, e))
        except Exception:  # a bug: logged with its traceback, and the model is told without it
            log.exception("%s failed", params.name)
            return refusal(f"{params.name} failed inside attachstore; its log says why. Tell the user.")

    async def read_image(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams, path: str
    ) -> types.CallToolResult | types.InputRequiredResult:
        roots = await self.roots.of(ctx, params)
        if isinstance(roots, types.InputRequiredResult):
            return roots
        bound = self.backend.file_bytes
        try:
            found = await asyncio.to_thread(read_inside, roots, path, bound)
        except Unreadable as e:
            return refusal(f"read_image: {e}.")
        except TooLarge as e:
            return refusal(too_large(e.size, bound, Path(path).name))
        stored = await self.backend.admit(found.data, found.path.name)
        if isinstance(stored, str):
            return refusal(stored)
        return await self._show(ctx, stored, found.path)

    async def read_attachment(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams, ref: str
    ) -> types.CallToolResult:
        try:
            stored = await self.backend.meta(str(Ref.parse(ref)))
        except AttachstoreError as e:  # the service's errors, or the HTTP client's with the same codes
            if e.code == InvalidRef.code:
                return refusal(
                    f"read_attachment: {shown(ref)} is not a reference; they look like sha256:<hex>."
                )
            if e.code == NotFound.code:
                return refusal(f"read_attachment: there is no attachment {shown(ref)} in this store.")
            raise
        return await self._show(ctx, stored, None)

    async def _show(
        self, ctx: ServerRequestContext[Any, Any], stored: Stored, path: Path | None
    ) -> types.CallToolResult:
        sent = await self.backend.sent_image(stored.ref)
        if isinstance(sent, str):  # render's placeholder: a text-only route, no variant that fits, damaged
            return refusal(f"{stored.ref} is stored but cannot be shown: {sent}")
        metadata = {
            "ref": stored.ref,
            "media_type": stored.media_type,
            "bytes": stored.bytes,
            "width": stored.width,
            "height": stored.height,
        } | ({"path": str(path)} if path is not None else {})
        # The text says all that structuredContent does: on the hosts that get no structuredContent it is
        # all the model learns besides the pixels (and the spec asks for the JSON in a text block).
        text = _text(stored, path, sent) + "\n" + json.dumps(metadata)
        content: list[types.ContentBlock] = [
            types.ImageContent(type="image", data=sent.data, mime_type=sent.media_type),
            types.TextContent(type="text", text=text),
        ]
        if self.options.resource_links:
            content.append(
                types.ResourceLink(
                    type="resource_link",
                    uri=uri_of(stored.ref),
                    name=stored.name or stored.ref,
                    mime_type=stored.media_type,
                    size=stored.bytes,
                )
            )
        structured = path is not None and _structured(ctx, self.options.structured)
        return types.CallToolResult(content=content, structured_content=metadata if structured else None)

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        start = _cursor(params.cursor if params is not None else None)
        held = await _or_nothing(self.backend.held())
        page = held[start : start + PAGE]
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name=s.name or s.ref,
                    title=f"{s.media_type} {s.width}x{s.height}" + (f" ({s.name})" if s.name else ""),
                    uri=uri_of(s.ref),
                    mime_type=s.media_type,
                    size=s.bytes,
                )
                for s in page
            ],
            next_cursor=str(start + PAGE) if start + PAGE < len(held) else None,
        )

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[TEMPLATE])

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        ref = ref_of(uri)
        if ref is None:
            raise MCPError(types.INVALID_PARAMS, f"not an attachstore resource: {uri[:200]}", {"uri": uri})
        try:
            media_type, data = await self.backend.blob(str(ref))
        except AttachstoreError as e:
            if e.code == NotFound.code:  # SEP-2164: not found is invalid params, naming the uri
                raise MCPError(types.INVALID_PARAMS, "Resource not found", {"uri": uri}) from None
            raise MCPError(types.INTERNAL_ERROR, f"{e.code}: {e.message}", {"uri": uri}) from None
        blob = pybase64.b64encode(data).decode("ascii")
        return types.ReadResourceResult(
            contents=[types.BlobResourceContents(uri=uri, mime_type=media_type, blob=blob)]
        )

    async def roots_changed(
        self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams
    ) -> None:
        self.roots.changed()


def _cursor(cursor: str | None) -> int:
    # ASCII digits only (str.isdigit() takes "²", which int() refuses), few enough for any list (int()
    # refuses 4,300 digits and more).
    if cursor is None:
        return 0
    if not re.fullmatch(r"[0-9]{1,18}", cursor):
        raise MCPError(types.INVALID_PARAMS, f"not a cursor of this server: {cursor[:40]!r}")
    return int(cursor)


async def _or_nothing(call: Awaitable[list[Stored]]) -> list[Stored]:
    """The session's holds, or none where the store cannot list them (the daemon is down, the token is
    refused, the data dir cannot be opened): logged, and answered as an empty list, not as a protocol error,
    on which hosts (Claude Code, gemini-cli) drop every tool of the server. The tools then say why."""
    try:
        return await call
    except AttachstoreError as e:
        log.warning("resources/list: nothing listed, the store answered %s: %s", e.code, e.message)
    except (OSError, ConfigError, IndexUnusable) as e:
        log.warning("resources/list: nothing listed, attachstore cannot use its store: %s", e)
    return []


async def _no_code_zero(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: a handler's unexpected exception is the JSON-RPC internal error (-32603), logged with
    its traceback. The SDK's dispatcher answers one with code 0 and the exception's text (its "v1 compat")."""
    if ctx.request_id is None:  # a notification: no answer; the SDK logs what its handler raises
        return await call_next(ctx)
    try:
        return await call_next(ctx)
    except (MCPError, ValidationError):  # the SDK's own answers: the error given, or -32602
        raise
    except Exception as e:
        log.exception("%s failed", ctx.method)
        raise MCPError(types.INTERNAL_ERROR, "Internal error; the server's log says why") from e


def build(backend: Backend, roots: Roots, options: Options = Options()) -> Server[Any]:
    tools = Tools(backend, roots, options)
    server: Server[Any] = Server(
        "attachstore",
        version=__version__,
        title="attachstore",
        instructions=INSTRUCTIONS,
        on_list_tools=tools.list_tools,
        on_call_tool=tools.call_tool,
        on_list_resources=tools.list_resources,
        on_list_resource_templates=tools.list_templates,
        on_read_resource=tools.read_resource,
    )
    server.middleware.append(_no_code_zero)
    # Not Server(on_roots_list_changed=...): that warns (MCPDeprecationWarning) as it is made.
    server.add_notification_handler(
        "notifications/roots/list_changed", types.NotificationParams, tools.roots_changed
    )
    return server
