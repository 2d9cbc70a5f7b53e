"""The real hosts (Claude Code, Codex, gemini-cli, opencode), each run non-interactively against a fake
model, with `attachstore mcp` configured from the host's snippet in docs/mcp.md as written: what the model
received from `read_image` and `read_attachment`, with the daemon up, down, and refusing the token."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from tests.interop.hosts.model import FakeModel, Say, Script
from tests.interop.hosts.scenario import (
    FITTED,
    MCP_PAGE,
    ONE_READ,
    PHOTO,
    REF,
    TOKEN,
    TOUR,
    Host,
    Place,
    explain,
    last,
    run,
)
from tests.support.daemon import free_port
from tests.support.images import opened

HOSTS = ("claude", "codex", "gemini", "opencode")  # modules of this folder, each with its HOST


def host(module: str) -> Host:
    found: Host = importlib.import_module(f"tests.interop.hosts.{module}").HOST
    return found


@pytest.mark.parametrize("module", HOSTS)
def test_the_model_gets_each_image_as_the_store_shows_it(
    module: str, hosts: Path, store: str, tmp_path: Path
) -> None:
    chosen = host(module)
    with FakeModel(chosen.protocol(), TOUR) as model:
        done = run(chosen, Place.make(tmp_path, store, TOKEN, model, hosts))
        why = explain(done, model)
        assert done.returncode == 0, why
        photo, notes, shot, again = last(model, 4).results[:4]
        final = model.requests[-1].reply
    # The photo, as stored: byte for byte (or, where the host re-encodes what it gets, the same picture).
    [image] = photo.images
    if chosen.exact:
        assert image.data == PHOTO, why
    else:
        assert opened(image.data).size == opened(PHOTO).size, why
    ref = REF.search(photo.text)
    assert ref is not None, why
    assert "photo.jpg" in photo.text, why
    # A text file named .png: the refusal, which the model reads, and no image.
    assert notes.images == (), why
    assert "UNSUPPORTED_IMAGE_TYPE" in notes.text, why
    assert notes.error in (True, None), why
    # The 2880x1800 screenshot, fitted to the route's request side.
    [fitted] = shot.images
    assert opened(fitted.data).size == FITTED, why
    assert "Shown here at 1568x980" in shot.text, why
    # read_attachment: the same image again.
    [same] = again.images
    assert same.data == image.data, why
    assert ref.group(0) in again.text, why
    assert final == Say(Script.FINAL), why


@pytest.mark.parametrize("module", HOSTS)
@pytest.mark.parametrize("failure", ["daemon down", "wrong token"])
def test_a_store_that_fails_leaves_the_tools_offered_and_the_model_reads_why(
    module: str, failure: str, hosts: Path, store: str, tmp_path: Path
) -> None:
    chosen = host(module)
    url, token, reason = (
        (f"http://127.0.0.1:{free_port()}", TOKEN, "not reachable")
        if failure == "daemon down"
        else (store, "ast_wrong_token_for_this_store", "UNAUTHORIZED")
    )
    with FakeModel(chosen.protocol(), ONE_READ) as model:
        done = run(chosen, Place.make(tmp_path, url, token, model, hosts))
        why = explain(done, model)
        assert done.returncode == 0, why
        [result] = last(model, 1).results[:1]
    assert result.images == (), why
    assert reason in result.text, why
    assert result.error in (True, None), why


def test_docs_name_the_versions_tested() -> None:
    """docs/mcp.md's table of what each host's model received names the versions package.json pins."""
    pins = json.loads((Path(__file__).parent / "package.json").read_text())["dependencies"]
    section = MCP_PAGE.read_text().split("### What each host's model received", 1)[1].split("\n### ", 1)[0]
    rows = [
        line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ") and "---" not in line
    ]
    shown = {name.strip(): version.strip() for name, version in rows[1:]}
    tested = {host(module).title: pins[host(module).package] for module in HOSTS}
    assert shown == tested
