"""What every host is put through, the same for all four: a project holding a photo, a text file named
`.png` and a Retina screenshot; a real daemon with a token; the host configured from its snippet in
docs/mcp.md; and a fake model that reads the three files with `read_image`, then the photo again with
`read_attachment`.

A host is a `Host`: its wire protocol, how its snippet becomes its configuration, and how it is run
non-interactively. The tests (test_hosts.py) check what the model received."""

from __future__ import annotations

import abc
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tests.interop.hosts.model import FakeModel, Protocol, Script, Step, ToolResult, Turn
from tests.support.documented import documented
from tests.support.images import encode, photo, ui_screenshot

ROOT = Path(__file__).resolve().parents[3]
MCP_PAGE = ROOT / "docs" / "mcp.md"
TAG = "tests/interop/hosts"
SHOWN_URL = "http://127.0.0.1:8731"  # the daemon's address as the snippets show it
SHOWN_PROJECT = "/home/me/proj"  # the project's directory as the snippets show it
RUN_SECONDS = 300  # a host's whole run; a guard against a hang, not a measure
TOKEN = "ast_hosts_interop_token_0123456789abcdef"

PHOTO = encode(photo(1200, 900), "JPEG", quality=88)
NOT_AN_IMAGE = b"These are meeting notes, saved with the wrong name.\n"
SCREENSHOT = encode(ui_screenshot(2880, 1800), "PNG")
SIDE = 1568  # every route's max_request_side: the screenshot is shown at 1568x980
FITTED = (1568, 980)
REF = re.compile(r"sha256:[0-9a-f]{64}")

# The routes the snippets name, each declared as a vision model with Anthropic's request side.
ROUTES = "".join(
    f'[routes."{name}"]\ninput_modalities = ["text", "image"]\nmax_request_side = {SIDE}\n'
    for name in ("claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro")
)

PROMPT = "Look at photo.jpg, notes.png and screenshot.png here with read_image, then at the photo again."


def _photo_again(results: tuple[ToolResult, ...]) -> dict[str, Any]:
    found = REF.search(results[0].text)
    return {"ref": found.group(0) if found else "sha256:" + "0" * 64}


TOUR = Script(
    [
        Step("read_image", {"path": "photo.jpg"}),
        Step("read_image", {"path": "notes.png"}),
        Step("read_image", {"path": "screenshot.png"}),
        Step("read_attachment", _photo_again),
    ]
)
ONE_READ = Script([Step("read_image", {"path": "photo.jpg"})])


@dataclass
class Place:
    """Where one host runs: its own home, the project it works in, the daemon its snippet names, the fake
    model it talks to, and the directory of the host's command."""

    home: Path
    project: Path
    store_url: str
    token: str
    model: FakeModel
    bin: Path

    @classmethod
    def make(cls, tmp: Path, store_url: str, token: str, model: FakeModel, bin: Path) -> Place:
        home, project = tmp / "home", tmp / "proj"
        home.mkdir()
        project.mkdir()
        (project / "photo.jpg").write_bytes(PHOTO)
        (project / "notes.png").write_bytes(NOT_AN_IMAGE)
        (project / "screenshot.png").write_bytes(SCREENSHOT)
        return cls(home, project, store_url, token, model, bin)

    def snippet(self, host: str, index: int = 0) -> str:
        """The host's snippet in docs/mcp.md as written, with this place's daemon and project in it."""
        text = documented(MCP_PAGE, TAG, f"{host}" if index == 0 else f"{host} {index}")
        return text.replace(SHOWN_URL, self.store_url).replace(SHOWN_PROJECT, str(self.project))

    def env(self) -> dict[str, str]:
        """The host's whole environment: nothing of the test's own, but a PATH on which `attachstore` is
        the installed command (the one docs/deployment.md's install puts there) and the token."""
        attachstore = Path(sys.executable).parent
        assert (attachstore / "attachstore").is_file(), f"no attachstore command beside {sys.executable}"
        path = os.pathsep.join([str(attachstore), str(self.bin), "/usr/local/bin", "/usr/bin", "/bin"])
        return {
            "PATH": path,
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "CI": "1",
            "TMPDIR": str(self.home),
            "ATTACHSTORE_TOKEN": self.token,
        }


class Host(abc.ABC):
    """One agent host: its npm command, its model protocol, its configuration from its snippet, and its
    non-interactive run."""

    name: ClassVar[str]  # the name docs/mcp.md marks its snippet with
    title: ClassVar[str]  # as docs/mcp.md names it in its table
    package: ClassVar[str]  # on npm (package.json)
    command: ClassVar[str]  # in node_modules/.bin
    exact: ClassVar[bool] = True  # an image reaches the model byte for byte (else re-encoded, same pixels)

    @abc.abstractmethod
    def protocol(self) -> Protocol: ...

    @abc.abstractmethod
    def configure(self, place: Place) -> None:
        """Write the host's configuration into `place` from its snippet (`place.snippet(self.name)`)."""

    @abc.abstractmethod
    def args(self, place: Place, prompt: str) -> list[str]:
        """The command's arguments for a non-interactive run of `prompt` in the project."""

    def environ(self, place: Place) -> Mapping[str, str]:
        """What the host needs in its environment besides `place.env()`: its model's address and a key."""
        return {}

    def version(self, bin: Path) -> str:
        done = subprocess.run(
            [str(bin / self.command), "--version"], capture_output=True, text=True, timeout=60
        )
        return done.stdout.strip().splitlines()[0] if done.stdout.strip() else done.stderr.strip()


def run(host: Host, place: Place, prompt: str = PROMPT) -> subprocess.CompletedProcess[str]:
    """The host's whole run in the project, its output kept; a run that hangs is killed after RUN_SECONDS."""
    host.configure(place)
    env = place.env() | dict(host.environ(place))
    return subprocess.run(
        [str(place.bin / host.command), *host.args(place, prompt)],
        cwd=place.project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def explain(done: subprocess.CompletedProcess[str], model: FakeModel) -> str:
    """A failure's context: how the host ended, its output's tail, and every request it made."""
    return (
        f"exit {done.returncode}\n--- stdout ---\n{done.stdout[-3000:]}\n"
        f"--- stderr ---\n{done.stderr[-3000:]}\n--- requests ---\n{model.transcript()}"
    )


def last(model: FakeModel, results: int) -> Turn:
    """The first conversation request that carried `results` tool results (the one after the last call)."""
    for turn in model.turns:
        if len(turn.results) >= results:
            return turn
    raise AssertionError(f"no request carried {results} tool results\n{model.transcript()}")
