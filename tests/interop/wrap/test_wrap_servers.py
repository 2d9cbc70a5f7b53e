"""`attachstore mcp wrap` in front of real third-party MCP servers from npm, unmodified, over stdio: the
reference server-everything (its image tools) and server-filesystem (read_media_file, which returns any file
raw), each driven by the official MCP TypeScript SDK's client (client.ts) once bare and once wrapped.

The bare half is the premise: what each server returns without the wrapper (the images as they are, a HEIC
as an opaque blob). Wrapped, every message passes as it came but the images of a result: an admitted image
is replaced by what the route can take, with a text naming its ref beside it; a refused one becomes the
soft-rejection text; the rest of the answer is the bare server's, and nothing of a gated image is left
anywhere in the answer (structuredContent included)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.interop.wrap.servers import HERE, installed
from tests.support import node
from tests.support.images import encode, opened, png, png_chunks, truncate, ui_screenshot

ATTACHSTORE = Path(sys.executable).parent / "attachstore"
ROUTE = "vision"
SIDE = 1568  # the route's max_request_side
CONFIG = (
    "[admission]\ndecode_workers = 1\n"
    f'[routes."{ROUTE}"]\ninput_modalities = ["text", "image"]\nmax_request_side = {SIDE}\n'
)
HEIC = Path(__file__).resolve().parents[2] / "gate" / "corpus" / "sources" / "heic" / "arrow.heic"
NOTES = b"These are meeting notes, saved with the wrong name.\n"
# server-everything's get-tiny-image (and get-annotated-message's image): the MCP logo, a 20x20 PNG
TINY_SHA256 = "4466be3b7a0e51778f8634f5e984197ec35c748caf4c3b32763f89c577d29614"

Line = dict[str, Any]


@pytest.fixture(scope="module")
def built() -> node.Node:
    return installed()


def files(directory: Path) -> dict[str, bytes]:
    """What server-filesystem is asked to read, written into `directory`: a 6000x4000 screenshot, an iPhone
    HEIC, a truncated PNG, a text file named .png, and a text file."""
    made = {
        "large.png": encode(ui_screenshot(6000, 4000), "PNG"),
        "photo.heic": HEIC.read_bytes(),
        "truncated.png": truncate(png(64, 48), -200),
        "notes.png": NOTES,
        "readme.txt": b"no image here\n",
    }
    directory.mkdir()
    for name, data in made.items():
        (directory / name).write_bytes(data)
    return made


@dataclass(frozen=True)
class Report:
    lines: dict[str, Line]  # client.ts's report, one line per call, keyed by its case (or its call)
    got: Path  # the images and blobs it got, each named by its digest
    stderr: str  # the servers' (and the wrapper's)

    def __getitem__(self, key: str) -> Line:
        return self.lines[key]


def client(found: node.Node, tmp_path: Path, server: str, *args: str) -> Report:
    out = tmp_path / f"{server}-got"
    out.mkdir()
    done = subprocess.run(
        [found.node, str(HERE / "dist" / "client.js"), server, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1] == {"call": "done"}, done.stdout + done.stderr
    report = {line.get("case", line.get("uri", line["call"])): line for line in lines}
    failed = {key: line["error"] for key, line in report.items() if "error" in line}
    assert failed == {}, f"{failed}\n{done.stderr}"
    return Report(report, out, done.stderr)


def wrapped(found: node.Node, tmp_path: Path, server: str, *args: str) -> Report:
    config = tmp_path / "attachstore.toml"
    config.write_text(f"data_dir = {json.dumps(str(tmp_path / 'data'))}\n{CONFIG}")
    assert ATTACHSTORE.is_file(), f"no attachstore command beside {sys.executable}"
    wrap = ("--wrap", str(ATTACHSTORE), "--config", str(config), "--route", ROUTE)
    return client(found, tmp_path, server, *args, *wrap)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bad_crcs(data: bytes) -> list[bytes]:
    """The kinds of the PNG's chunks whose CRC is wrong."""
    return [
        c.kind
        for c in png_chunks(data)
        if zlib.crc32(data[c.offset + 4 : c.end - 4]).to_bytes(4, "big") != data[c.end - 4 : c.end]
    ]


def holds(tmp_path: Path) -> set[tuple[str, str]]:
    """(session, ref) of every hold in the wrapper's data dir (none before it has one)."""
    if not (tmp_path / "data" / "index.sqlite3").exists():
        return set()
    with sqlite3.connect(tmp_path / "data" / "index.sqlite3") as db:
        return set(db.execute("SELECT session, ref FROM holds").fetchall())


def unchanged(line: Line) -> None:
    """A result the wrapper had nothing to do with: as the bare server answered it."""
    assert line["wrapped"] == line["bare"], line
    assert (line["same_rest"], line["same_fields"], line["same_structured"]) == (True, True, True), line
    assert line["added"] == [], line


def admitted(line: Line, got: Path, size: tuple[int, int]) -> str:
    """One image shown in place of the result's one image, at `size` (not as it came: nothing of its bytes
    is left anywhere in the answer), with a text naming its ref; the other blocks and fields as they came.
    Its ref."""
    answer = line["wrapped"]
    [image] = answer["images"]
    assert answer["blobs"] == [], line
    with opened((got / image["sha256"]).read_bytes()) as shown:
        assert shown.size == size, line
        assert Image.MIME[shown.format or ""] == image["mimeType"], line
    [ref] = answer["refs"]
    [text] = line["added"]
    assert ref in text, line
    assert line["raw"] is False, line
    assert answer["isError"] == line["bare"]["isError"], line
    assert (line["same_rest"], line["same_fields"]) == (True, True), line
    return str(ref)


def refused(line: Line, code: str) -> None:
    """The result's image became the soft-rejection text naming `code`; no image, no ref, and nothing of the
    bytes anywhere in the answer."""
    answer = line["wrapped"]
    assert (answer["images"], answer["blobs"], answer["refs"]) == ([], [], []), line
    assert [text for text in line["added"] if f"({code})" in text] != [], line
    assert line["raw"] is False, line
    assert (line["same_rest"], line["same_fields"]) == (True, True), line


def test_the_bare_servers_answer_images_as_they_are(built: node.Node, tmp_path: Path) -> None:
    """The premise, no wrapper: the tools named here exist and return what each file holds, unchecked."""
    made = files(tmp_path / "files")
    report = client(built, tmp_path, "everything")
    assert report["initialize"]["server"] == "mcp-servers/everything"
    assert {"get-tiny-image", "get-annotated-message"} <= set(report["tools/list"]["names"])
    for case in ("tiny", "annotated"):
        [image] = report[case]["bare"]["images"]
        assert (image["block"], image["mimeType"], image["sha256"]) == ("image", "image/png", TINY_SHA256)
    # The logo's colour profile chunk has a wrong CRC: a damaged PNG, which the gate refuses.
    assert bad_crcs((report.got / TINY_SHA256).read_bytes()) == [b"iCCP"]
    [blob] = report["blob"]["bare"]["blobs"]
    assert blob["mimeType"] == "text/plain"
    assert report["demo://resource/dynamic/blob/1"]["bare"][0]["mimeType"] == "text/plain"

    report = client(built, tmp_path, "filesystem", "--dir", str(tmp_path / "files"))
    assert report["initialize"]["server"] == "secure-filesystem-server"
    assert "read_media_file" in report["tools/list"]["names"]
    for name in ("large.png", "truncated.png", "notes.png"):
        answer = report[name]["bare"]
        [image] = answer["images"]
        assert (image["block"], image["mimeType"], image["sha256"]) == (
            "image",
            "image/png",
            sha256(made[name]),
        )
        assert answer["structured"] is True  # a copy of the content, the image's base64 included
    assert opened(made["large.png"]).size == (6000, 4000)
    # No .heic in its table of types: an embedded resource, application/octet-stream.
    [blob] = report["photo.heic"]["bare"]["blobs"]
    assert (blob["block"], blob["mimeType"], blob["sha256"]) == (
        "resource",
        "application/octet-stream",
        sha256(made["photo.heic"]),
    )


def test_server_everything_wrapped(built: node.Node, tmp_path: Path) -> None:
    report = wrapped(built, tmp_path, "everything")
    assert report["initialize"]["same"] is True
    assert report["tools/list"]["same"] is True
    # The logo, damaged (a bad CRC): refused, its texts around it kept; the call succeeds.
    for case in ("tiny", "annotated"):
        refused(report[case], "INVALID_IMAGE")
    assert report["tiny"]["wrapped"]["texts"][0] == "Here's the image you requested:"
    # No image: nothing changed, a text-only embedded resource and a request from the server (roots/list)
    # included.
    for case in ("no-image", "roots", "sum"):
        unchanged(report[case])
    blob = report["blob"]
    assert (blob["wrapped"]["images"], blob["wrapped"]["refs"], blob["added"]) == ([], [], []), blob
    assert [b["mimeType"] for b in blob["wrapped"]["blobs"]] == ["text/plain"]
    assert (blob["same_rest"], blob["same_fields"]) == (True, True), blob
    for uri in ("demo://resource/static/document/features.md", "demo://resource/dynamic/blob/1"):
        assert report[uri]["same"] is True, report[uri]
    assert holds(tmp_path) == set()


def test_server_filesystem_wrapped(built: node.Node, tmp_path: Path) -> None:
    files(tmp_path / "files")
    report = wrapped(built, tmp_path, "filesystem", "--dir", str(tmp_path / "files"), "--session", "fs-1")
    assert report["initialize"]["same"] is True
    assert report["tools/list"]["same"] is True
    # What the server writes to its stderr reaches the client's, through the wrapper's.
    assert report.stderr.count("Secure MCP Filesystem Server running on stdio") == 2, report.stderr
    # 6000x4000: stored at 2000x1333, shown fitted to the route's side.
    large = admitted(report["large.png"], report.got, (SIDE, 1045))
    # The HEIC, an application/octet-stream blob to the server: no image by what it declares, so no host shows
    # it to a model as one, and the wrapper passes it on as it came (docs/mcp.md, "Gate another server").
    unchanged(report["photo.heic"])
    refused(report["truncated.png"], "INVALID_IMAGE")
    refused(report["notes.png"], "UNSUPPORTED_IMAGE_TYPE")
    for case in ("text", "dirs"):
        unchanged(report[case])
    assert holds(tmp_path) == {("fs-1", large)}


def test_the_client_is_the_one_this_folder_pins() -> None:
    """client.ts runs against the SDK of the lock, which the servers share (no second copy of it)."""
    lock = json.loads((HERE / "package-lock.json").read_text())["packages"]
    assert lock["node_modules/@modelcontextprotocol/sdk"]["version"].startswith("1.32.")
    nested = [path for path in lock if path.endswith("/node_modules/@modelcontextprotocol/sdk")]
    assert nested == []
