"""The images of one MCP result through the gate (docs/mcp.md, "Gate another server"): found as
POST /v1/mcp/results finds them, admitted as one `mcp` batch into the backend's session, and each replaced by
what the route can take with a text naming its ref beside it; a refusal, or a store that cannot answer,
turns them into the text for the model. Everything else in the result stays as it came, in its order."""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

from ..errors import AttachstoreError, ConfigError, IndexUnusable
from ..mcpimages import Found, Malformed, block_image, contents_image, refused
from .backends import Backend, SentImage, Stored
from .texts import described, failed

log = logging.getLogger(__name__)

BY = ", stored by attachstore"  # after the ref, in the text beside each image
Shown = list[tuple[Stored, SentImage | str]]


@dataclass(frozen=True, slots=True)
class Gate:
    backend: Backend
    # When the store cannot answer, the images go on unchecked instead of becoming a text: unsafe, since
    # one the model's provider refuses can break the session for good (docs/mcp.md).
    unsafe_pass: bool = False

    async def tool_result(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """A CallToolResult with its images gated, or None when it has none (or they pass unchecked): it
        then goes on as it came. A refusal is the text for the model in the first image's place, the other
        images gone, as POST /v1/mcp/results answers it."""
        content = result.get("content")
        if not isinstance(content, list):
            return None
        found = {i: f for i, block in enumerate(content) if (f := block_image(block, f"$.content[{i}]"))}
        if not found:
            return None
        shown = await self._shown(list(found.values()), "tool result")
        if shown is None:
            return None
        originals = {f.data for f in found.values() if isinstance(f, Found)}
        if isinstance(shown, str):
            gated = {**result, "content": refused(content, list(found), shown)}
            return _restructured(gated, dict.fromkeys(originals, shown))
        by_position = dict(zip(found, shown, strict=True))
        out: list[Any] = []
        instead: dict[str, SentImage | str] = {}  # each image's base64 -> what stands for it now
        for i, block in enumerate(content):
            if i not in by_position:
                out.append(block)
                continue
            stored, sent = by_position[i]
            original = found[i]
            if isinstance(sent, str):  # left out by render: past the budget, or unavailable
                text = _left_out(stored, sent)
                out.append({"type": "text", "text": text})
                if isinstance(original, Found):
                    instead[original.data] = text
                continue
            if block["type"] == "image":
                out.append({**block, "data": sent.data, "mimeType": sent.media_type})
            else:
                out.append({**block, "resource": _with_blob(block["resource"], sent)})
            out.append({"type": "text", "text": described(stored, sent, BY)})
            if isinstance(original, Found):
                instead[original.data] = sent
        return _restructured({**result, "content": out}, instead)

    async def resource_result(self, result: dict[str, Any]) -> dict[str, Any] | None:
        """A ReadResourceResult with its image blobs gated, or None when it has none (or they pass
        unchecked). Each entry keeps its uri: an admitted one is followed by a text entry naming the ref, and
        a refused or left-out one becomes a text entry."""
        contents = result.get("contents")
        if not isinstance(contents, list):
            return None
        found = {
            i: f
            for i, entry in enumerate(contents)
            if isinstance(entry, dict) and (f := contents_image(entry, f"$.contents[{i}]"))
        }
        if not found:
            return None
        shown = await self._shown(list(found.values()), "resource read")
        if shown is None:
            return None
        by_position = {} if isinstance(shown, str) else dict(zip(found, shown, strict=True))
        out: list[Any] = []
        for i, entry in enumerate(contents):
            if i not in found:
                out.append(entry)
                continue
            if isinstance(shown, str):
                out.append(_as_text(entry, shown))
                continue
            stored, sent = by_position[i]
            if isinstance(sent, str):
                out.append(_as_text(entry, _left_out(stored, sent)))
                continue
            out.append(_with_blob(entry, sent))
            uri = {"uri": entry["uri"]} if "uri" in entry else {}
            out.append({**uri, "mimeType": "text/plain", "text": described(stored, sent, BY)})
        return {**result, "contents": out}

    async def _shown(self, found: list[Found | Malformed], result: str) -> Shown | str | None:
        """Each image admitted and as the route takes it; or the text that stands for them all; or None,
        for images to pass unchecked."""
        from ..service import Upload  # where used: the store (with the gate and Pillow) waits for an image

        count = len(found)
        what = f"The {result} contained " + ("an image" if count == 1 else f"{count} images")
        bad = next((f for f in found if isinstance(f, Malformed)), None)
        if bad is not None:
            why = f"the server's answer is malformed at {bad.where}: {bad.message}"
            return f"{what}, but {'it was not' if count == 1 else 'none were'} attached: {why}."
        uploads = [Upload.of_base64(f.data, f.declared, f.name) for f in found if isinstance(f, Found)]
        try:
            stored = await self.backend.admit_mcp(uploads)
            if isinstance(stored, str):
                return stored
            sent = await self.backend.sent_images([s.ref for s in stored])
        except (AttachstoreError, OSError, ConfigError, IndexUnusable) as e:
            if self.unsafe_pass:
                log.warning("images passed on unchecked (--unsafe-pass-images); the store: %s", e)
                return None
            return failed(f"{what}, but {'it was' if count == 1 else 'they were'} not checked", e)
        except Exception:  # a bug: logged with its traceback, and the model is told without it
            log.exception("gating a result's images failed")
            checked = "it was" if count == 1 else "they were"
            return f"{what}, but {checked} not checked: attachstore failed; its log says why. Tell the user."
        return list(zip(stored, sent, strict=True))


@functools.cache
def warm() -> None:
    """What gating imports at its first image (the store, the gate with Pillow, render, the HTTP client:
    about a second), imported now in a thread of its own: on the event loop, the import would hold every
    other line the wrapper passes on. Once per process."""

    def imported() -> None:
        for module in ("attachstore.service", "attachstore.render", "attachstore.client"):
            importlib.import_module(module)

    threading.Thread(target=imported, name="gating-imports", daemon=True).start()


def has_images(result: dict[str, Any], kind: str) -> bool:
    """Whether a result of this kind ("tool" or "resource") has anything to gate: found as the gate will
    find it, without reading an image."""
    if kind == "resource":
        contents = result.get("contents")
        return isinstance(contents, list) and any(
            isinstance(entry, dict) and contents_image(entry, "") is not None for entry in contents
        )
    content = result.get("content")
    return isinstance(content, list) and any(block_image(block, "") is not None for block in content)


def _left_out(stored: Stored, placeholder: str) -> str:
    held = f"{stored.ref}: {stored.media_type}, {stored.width}x{stored.height}, {stored.bytes:,} bytes"
    return f"{placeholder} (attachstore holds it as {held}.)"


def _with_blob(contents: dict[str, Any], sent: SentImage) -> dict[str, Any]:
    return {**contents, "blob": sent.data, "mimeType": sent.media_type}


def _as_text(contents: dict[str, Any], text: str) -> dict[str, Any]:
    # The blob's place holds the text, and the type says so; the uri and every other key stay where they were.
    out: dict[str, Any] = {}
    for key, value in contents.items():
        if key == "blob":
            out["text"] = text
        else:
            out[key] = "text/plain" if key == "mimeType" else value
    return out


def _restructured(result: dict[str, Any], instead: dict[str, SentImage | str]) -> dict[str, Any]:
    """`result` with the copies of its images in `structuredContent` (a server may repeat its content
    there, base64 and all) changed as the content was: none of a gated image's bytes is left anywhere. A
    shown image's object gets the shown bytes and type; a refused or left-out one keeps its shape with its
    data emptied, since the tool's outputSchema may require an image there (the content says why)."""
    if "structuredContent" not in result or not instead:
        return result

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        for key, field in value.items():
            if isinstance(field, str) and field in instead:
                now = instead[field]
                if isinstance(now, str):
                    return {**value, key: ""}
                kind = {"mimeType": now.media_type} if "mimeType" in value else {}
                return {**value, key: now.data, **kind}
        return {key: walk(field) for key, field in value.items()}

    return {**result, "structuredContent": walk(result["structuredContent"])}
