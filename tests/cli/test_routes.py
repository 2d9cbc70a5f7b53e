"""`attachstore routes`: every declaration and where it comes from, how one model id resolves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attachstore.cli import main

DAEMON = """
[routes."gpt-4o"]
input_modalities = ["text", "image"]
provider = "openai-chat"

[routes."deepseek-chat"]
input_modalities = ["text"]

[routes."local-llm"]
input_modalities = ["text"]
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTACHSTORE_CONFIG", raising=False)


@pytest.fixture
def daemon_config(tmp_path: Path) -> Path:
    path = tmp_path / "attachstore.toml"
    path.write_text(DAEMON)
    return path


def test_the_listing_shows_every_declaration_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, daemon_config: Path
) -> None:
    data_dir = tmp_path / "data"
    code, out, _ = run(capsys, "routes", "--config", str(daemon_config), "--data-dir", str(data_dir))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ROUTE", "INPUT", "PROVIDER", "DECLARED", "BY"]
    assert lines[1].split() == [
        "deepseek-chat",
        "text",
        "-",
        "config",
        "(replaces",
        "catalog",
        "deepseek-chat)",
    ]
    assert lines[2].split() == [
        "gpt-4o",
        "text,",
        "image",
        "openai-chat",
        "config",
        "(replaces",
        "catalog",
        "gpt-4o*)",
    ]
    assert lines[3].split() == ["local-llm", "text", "-", "config"]
    assert ["claude-*", "text,", "image", "anthropic", "catalog"] in [line.split() for line in lines]
    assert lines[-1].startswith("3 routes of the configuration over ")
    assert not data_dir.exists()  # a question creates no store


def test_how_a_model_id_resolves(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, daemon_config: Path
) -> None:
    where = ("--config", str(daemon_config), "--data-dir", str(tmp_path / "data"))
    code, out, _ = run(capsys, "routes", *where, "anthropic/claude-opus-4-8")
    assert code == 0
    assert "images:       accepted, from every source" in out
    assert "declared by:  the built-in catalog 2026-12-01, entry claude-* (matched as claude-opus-4-8)" in out
    assert "provider:     none (the render request names it)" in out
    assert "source:       https://" in out
    out = run(capsys, "routes", *where, "local-llm")[1]
    assert 'declared by:  the configuration, [routes."local-llm"]\n' in out
    assert "images:       not accepted" in out
    out = run(capsys, "routes", *where, "my-llm")[1]
    assert "images:       unknown: uploads are admitted, tool and MCP images are not" in out
    assert 'declare it:   [routes."my-llm"] with input_modalities = ["text", "image"], or ["text"]' in out


def test_json_is_what_the_api_answers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, daemon_config: Path
) -> None:
    where = ("--config", str(daemon_config), "--data-dir", str(tmp_path / "data"))
    listing = json.loads(run(capsys, "routes", *where, "--json")[1])
    assert set(listing) == {"catalog", "routes"}
    assert [r["id"] for r in listing["routes"][:3]] == ["deepseek-chat", "gpt-4o", "local-llm"]
    assert listing["routes"][1]["replaces"] == "gpt-4o*"
    one = json.loads(run(capsys, "routes", *where, "gpt-4.1-mini", "--json")[1])
    assert (one["accepts_images"], one["route"]["id"], one["route"]["declared_by"]) == (
        True,
        "gpt-4.1*",
        "catalog",
    )
