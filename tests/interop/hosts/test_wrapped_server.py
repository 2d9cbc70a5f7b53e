"""A real host with a third-party MCP server behind `attachstore mcp wrap`: Claude Code, its project's
`.mcp.json` naming the reference server-filesystem (tests/interop/wrap), unmodified, as the wrapped command,
against a real daemon. The fake model reads a 6000x4000 screenshot with the server's `read_media_file`; its
next request must carry the screenshot fitted to the route, and the ref beside it.

Without the wrapper (the same run with the server's command in place of attachstore's), Claude Code 2.1.332
shrinks the image to 2000x1333 itself and, as the result has structuredContent (a copy of the content),
shows the model that JSON in place of the text: the original PNG's base64, cut at about 94,000 characters.
So the wrapper's answer to Claude Code must hold no image in structuredContent, and the ref's text must
reach the model."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from tests.interop.hosts.claude import ClaudeCode
from tests.interop.hosts.model import FakeModel, Say, Script, Step
from tests.interop.hosts.scenario import REF, SIDE, TOKEN, Place, explain, last, run
from tests.interop.wrap import servers
from tests.support.images import encode, opened, ui_screenshot

ROUTE = "claude-sonnet-4-5"  # declared in the daemon's configuration with max_request_side = SIDE
FITTED = (SIDE, 1045)  # stored at 2000x1333 (the gate's max_side), shown at the route's side
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{1000,}")  # an image's base64 where text should be


class WrappedFilesystem(ClaudeCode):
    """Claude Code with server-filesystem, wrapped, as the project's one MCP server `filesystem`."""

    def __init__(self, node: str) -> None:
        self.node = node

    def configure(self, place: Place) -> None:
        server = servers.command(servers.FILESYSTEM)
        wrap = ["mcp", "wrap", "--route", ROUTE, "--url", place.store_url, "--"]
        entry = {
            "type": "stdio",
            "command": "attachstore",
            "args": [*wrap, self.node, str(server), str(place.project)],
            "env": {"ATTACHSTORE_TOKEN": "${ATTACHSTORE_TOKEN}"},
        }
        (place.project / ".mcp.json").write_text(json.dumps({"mcpServers": {"filesystem": entry}}))

    def args(self, place: Place, prompt: str) -> list[str]:
        return ["-p", prompt, "--output-format", "json", "--allowedTools", "mcp__filesystem"]


def held(data: Path) -> set[str]:
    with sqlite3.connect(data / "index.sqlite3") as db:
        return {ref for (ref,) in db.execute("SELECT ref FROM holds WHERE tenant = 'hosts'")}


def test_claude_code_gets_a_wrapped_servers_image_fitted_with_its_ref(
    hosts: Path, store: str, tmp_path: Path
) -> None:
    host = WrappedFilesystem(servers.installed().node)
    path = tmp_path / "proj" / "large.png"  # in the project Place.make makes
    with FakeModel(host.protocol(), Script([Step("read_media_file", {"path": str(path)})])) as model:
        place = Place.make(tmp_path, store, TOKEN, model, hosts)
        path.write_bytes(encode(ui_screenshot(6000, 4000), "PNG"))
        done = run(host, place, "Look at large.png with read_media_file.")
        why = explain(done, model)
        assert done.returncode == 0, why
        [result] = last(model, 1).results[:1]
        final = model.requests[-1].reply
    [image] = result.images
    assert opened(image.data).size == FITTED, why
    ref = REF.search(result.text)
    assert ref is not None, why
    assert BASE64_RUN.search(result.text) is None, why
    assert result.error in (False, None), why
    assert final == Say(Script.FINAL), why
    assert ref.group(0) in held(tmp_path / "data"), why
