"""`attachstore routes` and the store's policy as the local commands apply it (in-process)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from attachstore.cli import main
from attachstore.config import load
from attachstore.service import Store, Upload
from tests.support.images import png

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


def served(config_file: Path, data_dir: Path, session: str | None = None) -> None:
    """What a daemon leaves in the store: its policy recorded (and, given `session`, a session on gpt-4o
    holding an image). The daemon has stopped since; the record stays."""

    async def go() -> None:
        config = load(str(config_file), overrides={"data_dir": str(data_dir)})
        store = await Store.open(config, workers=1, policy="serve")
        try:
            if session is not None:
                await store.sessions.create(("", session), "gpt-4o")
                await store.admit([Upload.of_bytes(png(8, 8))], "user", session=session)
        finally:
            await store.close()

    asyncio.run(go())


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
    assert lines[-1].endswith("this configuration's own (no daemon has recorded the store's)")
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
    assert set(listing) == {"catalog", "policy", "routes"}
    assert [r["id"] for r in listing["routes"][:3]] == ["deepseek-chat", "gpt-4o", "local-llm"]
    assert listing["routes"][1]["replaces"] == "gpt-4o*"
    one = json.loads(run(capsys, "routes", *where, "gpt-4.1-mini", "--json")[1])
    assert (one["accepts_images"], one["route"]["id"], one["route"]["declared_by"]) == (
        True,
        "gpt-4.1*",
        "catalog",
    )


def test_without_a_configuration_the_commands_apply_the_daemons_policy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, daemon_config: Path
) -> None:
    data_dir = tmp_path / "data"
    served(daemon_config, data_dir, session="chat-1")
    code, out, _ = run(capsys, "routes", "--data-dir", str(data_dir))
    assert code == 0
    assert "local-llm" in out.splitlines()[3]
    assert "the store's, as the daemon " in out.splitlines()[-1]
    # local-llm is the daemon's only: without its policy the switch would be to an unknown model, allowed.
    code, _, err = run(capsys, "session", "route", "--data-dir", str(data_dir), "chat-1", "local-llm")
    assert code == 1
    assert "ROUTE_SWITCH_REJECTED" in err
    assert 'declared by [routes."local-llm"] in the configuration' in err
    code, _, err = run(
        capsys, "put", "--data-dir", str(data_dir), "--route", "local-llm", str(_image(tmp_path))
    )
    assert (code, "MODALITY_UNSUPPORTED" in err) == (1, True)


def test_a_command_with_another_policy_refuses_and_names_the_difference(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, daemon_config: Path
) -> None:
    data_dir = tmp_path / "data"
    served(daemon_config, data_dir, session="chat-1")
    other = tmp_path / "other.toml"
    other.write_text('[routes."gpt-4o"]\ninput_modalities = ["text", "image"]\n[limits]\nmax_side = 4000\n')
    code, _, err = run(
        capsys, "session", "route", "--config", str(other), "--data-dir", str(data_dir), "chat-1", "local-llm"
    )
    assert code == 2
    assert 'routes."local-llm": declared in the store\'s policy, not here' in err
    assert "limits.max_side: 2000 in the store's policy, 4000 here" in err
    show = run(capsys, "session", "show", "--data-dir", str(data_dir), "chat-1")
    assert json.loads(show[1])["route"] == "gpt-4o"  # nothing changed
    # The daemon's own configuration agrees with the record.
    code, _, err = run(
        capsys, "session", "route", "--config", str(daemon_config), "--data-dir", str(data_dir), "chat-1", "x"
    )
    assert code == 0, err
    # Commands that apply no policy open the store whatever their configuration says.
    ref = json.loads(show[1])["holds"][0]
    assert run(capsys, "stat", "--config", str(other), "--data-dir", str(data_dir), ref)[0] == 0


def _image(tmp_path: Path) -> Path:
    path = tmp_path / "shot.png"
    path.write_bytes(png(9, 9))
    return path
