"""The command line's parser: every option says what it does and its default, every positional what it
means, and --config and --data-dir go before the command as well as after it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from attachstore.cli import main
from attachstore.cli.main import _parser
from tests.support.images import png


def parsers(
    parser: argparse.ArgumentParser, path: str = "attachstore"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser and every subcommand's, each with the command line that reaches it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    found = []
    for action in parser._actions:
        name = "/".join(action.option_strings) or action.dest
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            found += [f"{name} {c}: no help" for c in action.choices if c not in helped]
        elif not action.help or action.help == argparse.SUPPRESS:
            found.append(f"{name}: no help")
        elif (
            action.option_strings
            and action.nargs != 0
            and not action.required
            and "default" not in action.help
        ):
            found.append(f"{name}: its help does not say the default")  # an option that takes a value
    return found


def test_every_option_and_positional_has_help_and_every_default_is_said() -> None:
    missing = {path: found for path, p in parsers(_parser()) if (found := undocumented(p))}
    assert missing == {}


def test_the_walk_finds_an_option_without_help() -> None:
    p = _parser()
    p.add_argument("--bare", metavar="X")
    p.add_argument("--quiet-default", default=3, help="something")
    assert undocumented(p) == ["--bare: no help", "--quiet-default: its help does not say the default"]
    assert len(list(parsers(_parser()))) > 10  # it reaches the subcommands, and the session actions


def test_the_help_shows_the_data_dir_resolved(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ATTACHSTORE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with pytest.raises(SystemExit):
        main(["put", "--help"])
    assert str(tmp_path / "xdg" / "attachstore") in "".join(capsys.readouterr().out.split())  # wrapped


@pytest.mark.parametrize(
    "argv",
    [
        ["--data-dir", "{d}", "put", "{f}"],
        ["put", "--data-dir", "{d}", "{f}"],
        ["put", "{f}", "--data-dir", "{d}"],
        ["--data-dir", "elsewhere", "put", "--data-dir", "{d}", "{f}"],  # the last one given wins
    ],
)
def test_global_options_go_before_the_command_or_after_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    image = tmp_path / "shot.png"
    image.write_bytes(png(9, 9))
    data = tmp_path / "data"
    assert main([a.format(d=data, f=image) for a in argv]) == 0
    assert (data / "index.sqlite3").exists()
    assert not Path("elsewhere").exists()


def test_global_options_reach_the_session_actions_from_every_place(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    d = str(tmp_path / "data")
    assert main(["--data-dir", d, "session", "create", "s1"]) == 0
    assert main(["session", "--data-dir", d, "create", "s2"]) == 0
    assert main(["session", "create", "--data-dir", d, "s3"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", d, "session", "show", "s2"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == "s2"
    config = tmp_path / "c.toml"
    config.write_text(f'data_dir = "{d}"\n')
    assert main(["--config", str(config), "session", "show", "s3"]) == 0
    assert json.loads(capsys.readouterr().out)["session"] == "s3"


def test_put_ref_only_prints_the_refs_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = []
    for i in range(2):
        files.append(tmp_path / f"{i}.png")
        files[-1].write_bytes(png(5, 5, seed=i))
    assert main(["--data-dir", str(tmp_path / "d"), "put", "--ref-only", *map(str, files)]) == 0
    refs = capsys.readouterr().out.splitlines()
    assert len(refs) == 2
    assert all(r.startswith("sha256:") and len(r) == 71 for r in refs)
    with pytest.raises(SystemExit):
        main(["put", "--ref-only", "--json", str(files[0])])
    assert "not allowed with" in capsys.readouterr().err
