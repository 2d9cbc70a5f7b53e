"""Run a document's examples as written against a live daemon, and compare what they show.

The convention, in the markdown:

- A fenced block whose info string is `console` runs. Each `$ ` line is a command, followed by the output it
  shows (standard output and standard error, as a terminal shows them). A command goes on over the next lines
  while it is unfinished: a line that ends in `\\` or `|`, or a quote still open. `$ echo $?` after a command
  shows its exit status; any other command must exit 0.
- A fenced block with `file=NAME` in its info string (```` ```python file=host.py ````) writes the file, at
  that point of the document, into the directory the commands run in.
- Other blocks (`sh`, `text`, `json`, ...) are shown, not run.
- `…` in an output stands for any text within its line; a line that is only `…` for any number of lines.
- What varies from run to run is compared as a kind, not as text: timestamps, HTTP dates, 32-hex ids
  (request ids, staging files), tokens and their hashes, the server's version. The daemon's address is shown
  as 127.0.0.1:8731 (and the port after it as 8732), the directory the commands run in as `~`.

Each document runs in a fresh directory, which is also `$HOME`, with no configuration and a fresh store in
`~/.local/share/attachstore` (`$XDG_DATA_HOME/attachstore`, the default), against `attachstore serve` on a
free port (`$ATTACHSTORE_LISTEN` and the client's `$ATTACHSTORE_URL` name it), as `make run` would start it.
`.venv/bin/python` and `.venv/bin/attachstore` are the interpreter running this, and `attachstore` is on the
PATH; `docs/` is the checkout's. The images a document uses are made by its own commands, so their refs are
exact.

With `update`, the outputs are rewritten from the run: lines that still match are kept as they are (with their
`…` and example timestamps), the others are replaced, long base64 shortened to `…`.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.daemon import Daemons, free_port

ROOT = Path(__file__).resolve().parent.parent.parent
DOCUMENTS = ["README.md", "docs/quickstart.md", "docs/cli.md"]
SHOWN_ADDRESS, SHOWN_PORT = "127.0.0.1", 8731
TIMEOUT = 300.0  # for a whole document

_FENCE = re.compile(r"^( *)(`{3,})\s*([\w+-]*)(.*)$")
_FILE = re.compile(r"\bfile=(\S+)")
_VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"), "<time>"),
    (re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT"), "<http-date>"),
    (re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])"), "<id>"),
    (re.compile(r"ast_[A-Za-z0-9_-]{43}"), "<token>"),
    (re.compile(r'(token_sha256 = )"[0-9a-f]{64}"'), r'\1"<sha256>"'),
    (re.compile(r"Python/[\d.]+ aiohttp/[\w.]+"), "Python/<version> aiohttp/<version>"),
]
_BASE64 = re.compile(r"[A-Za-z0-9+/]{100,}={0,2}")
ELLIPSIS = "…"


@dataclass
class Command:
    text: str  # as written, without the "$ "
    expected: list[str]  # the output the document shows
    line: int  # where the command starts in the document (0-based)
    output: tuple[int, int]  # the document's lines that hold the output: [start, end)
    indent: str = ""  # of the block (one in a list item)


@dataclass
class File:
    name: str
    text: str


@dataclass
class Ran:
    command: Command
    status: int | None  # None: never ran (an earlier command hung)
    actual: list[str] = field(default_factory=list)


def parse(text: str) -> list[Command | File]:
    lines = text.split("\n")
    steps: list[Command | File] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, lang, rest = fence.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks), len(lines))
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        if lang == "console":
            steps += _commands(body, i + 1, indent)
        elif named := _FILE.search(rest):
            steps.append(File(named.group(1), "\n".join(body) + "\n"))
        i = end + 1
    return steps


def _unfinished(command: str) -> bool:
    if command.endswith(("\\", "|", "&&")):
        return True
    try:
        shlex.split(command, comments=True)
    except ValueError:  # a quote still open
        return True
    return False


def _commands(body: list[str], offset: int, indent: str) -> list[Command | File]:
    found: list[Command | File] = []
    i = 0
    if body and not body[0].startswith("$ "):
        raise ValueError(f"line {offset + 1}: a console block starts with a `$ ` command")
    while i < len(body):
        start = i
        command = body[i][2:]
        while _unfinished(command) and i + 1 < len(body):
            i += 1
            command += "\n" + body[i]
        i += 1
        out = i
        while i < len(body) and not body[i].startswith("$ "):
            i += 1
        found.append(Command(command, body[out:i], offset + start, (offset + out, offset + i), indent))
    return found


def _varying(text: str) -> str:
    for pattern, kind in _VARYING:
        text = pattern.sub(kind, text)
    return text


def _line_pattern(line: str) -> str:
    return ".*?".join(re.escape(part) for part in _varying(line).split(ELLIPSIS))


def matches(expected: list[str], actual: list[str]) -> bool:
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == ELLIPSIS else _line_pattern(line) + r"\n" for line in expected
    )
    return re.fullmatch(pattern, "".join(_varying(line) + "\n" for line in actual)) is not None


def _line_matches(expected: str, actual: str) -> bool:
    return (
        expected.strip() != ELLIPSIS and re.fullmatch(_line_pattern(expected), _varying(actual)) is not None
    )


def shorten(line: str) -> str:
    return _BASE64.sub(lambda m: m.group()[:16] + ELLIPSIS, line)


def rewritten(expected: list[str], actual: list[str]) -> list[str]:
    """The output to show: the document's lines where they still match, the run's elsewhere."""
    return [
        expected[i] if i < len(expected) and _line_matches(expected[i], line) else shorten(line)
        for i, line in enumerate(actual)
    ]


class _Place:
    """The directory a document runs in, its environment and its daemon."""

    def __init__(self, tmp: Path, python: str) -> None:
        self.python = python
        self.work = tmp / "home"
        self.bin = self.work / ".venv" / "bin"
        self.bin.mkdir(parents=True)
        self.port = free_port()
        # Scripts, not symlinks: a link to a venv's python outside the venv loses the venv. The environment's
        # own console script where it has one, so an installed wheel is toured through its entry point.
        script = Path(python).parent / "attachstore"
        cli = shlex.quote(str(script)) if script.is_file() else f"{shlex.quote(python)} -m attachstore"
        for name, line in (
            ("python", f'exec {shlex.quote(python)} "$@"'),
            ("attachstore", f'exec {cli} "$@"'),
        ):
            (self.bin / name).write_text(f"#!/bin/sh\n{line}\n")
            (self.bin / name).chmod(0o755)
        (self.work / "docs").symlink_to(ROOT / "docs")
        address = f"127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTACHSTORE_", "XDG_"))} | {
            "HOME": str(self.work),
            "XDG_DATA_HOME": str(self.work / ".local" / "share"),
            "ATTACHSTORE_LISTEN": address,
            "ATTACHSTORE_URL": f"http://{address}",
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "COLUMNS": "110",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def as_run(self, text: str) -> str:
        """The document's text as it runs here: its address is this daemon's."""
        return text.replace(f"{SHOWN_ADDRESS}:{SHOWN_PORT}", f"127.0.0.1:{self.port}")

    def as_shown(self, text: str) -> str:
        text = text.replace("\r\n", "\n")
        text = text.replace(f"127.0.0.1:{self.port + 1}", f"{SHOWN_ADDRESS}:{SHOWN_PORT + 1}")
        text = text.replace(f"127.0.0.1:{self.port}", f"{SHOWN_ADDRESS}:{SHOWN_PORT}")
        return text.replace(str(self.work), "~")


def run(steps: list[Command | File], tmp: Path, python: str = sys.executable) -> tuple[list[Ran], str]:
    """Run the steps in one shell, each command's output and status to files of its own; and the log of
    the daemon. `python` is the interpreter whose attachstore runs them."""
    place = _Place(tmp, python)
    outputs = tmp / "outputs"
    outputs.mkdir()
    script = ["set +e", f"cd {shlex.quote(str(place.work))}"]
    commands = []
    for step in steps:
        if isinstance(step, File):
            script.append(
                f"cat > {shlex.quote(step.name)} <<'__DOCUMENT_FILE__'\n{place.as_run(step.text)}"
                "__DOCUMENT_FILE__"
            )
            continue
        out = outputs / str(len(commands))
        commands.append((step, out))
        script.append(
            f"{{ {place.as_run(step.text)}\n}} >{out} 2>&1 </dev/null; __rc=$?; echo $__rc >{out}.rc; "
            "(exit $__rc)"
        )
    (tmp / "script.sh").write_text("\n".join(script) + "\n")
    with Daemons(tmp) as daemons:
        command = (python, "-m", "attachstore", "serve")
        daemon = daemons.start(command=command, port=place.port, environ=place.env, cwd=place.work)
        with contextlib.suppress(subprocess.TimeoutExpired):  # what did not finish has no status
            subprocess.run(["bash", str(tmp / "script.sh")], env=place.env, timeout=TIMEOUT, check=False)
    ran = []
    for command, out in commands:
        rc = out.with_suffix(".rc")
        status = int(rc.read_text()) if rc.exists() else None
        text = place.as_shown(out.read_text(errors="replace")) if out.exists() else ""
        ran.append(Ran(command, status, text.removesuffix("\n").split("\n") if text else []))
    return ran, place.as_shown(daemon.log.read_text(errors="replace"))


def check(path: Path, *, update: bool = False, python: str = sys.executable) -> list[str]:
    """The differences between what `path` shows and what its commands print, as messages; with `update`,
    rewrite the outputs instead, and report only what a rewrite cannot fix. `python` is the interpreter
    whose attachstore runs them (by default this one)."""
    text = path.read_text()
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    try:
        steps = parse(text)
    except ValueError as e:
        return [f"{name}: {e}"]
    with tempfile.TemporaryDirectory(prefix="attachstore-docs-") as tmp:
        ran, log = run(steps, Path(tmp), python)
    problems = []
    replaced: list[tuple[tuple[int, int], list[str]]] = []
    for n, r in enumerate(ran):
        where = f"{name}:{r.command.line + 1}: $ {r.command.text}"
        shows_status = n + 1 < len(ran) and ran[n + 1].command.text.strip() == "echo $?"
        if r.status is None:
            problems.append(f"{where}\n  did not finish within {TIMEOUT:g} s")
            continue
        if r.status != 0 and not shows_status:
            problems.append(f"{where}\n  exited {r.status} (show it with `$ echo $?` if it should)")
        if matches(r.command.expected, r.actual):
            continue
        if update:
            new = rewritten(r.command.expected, r.actual)
            replaced.append((r.command.output, [r.command.indent + line if line else line for line in new]))
            continue
        diff = difflib.unified_diff(
            r.command.expected, [shorten(line) for line in r.actual], lineterm="", n=1
        )
        problems.append(
            f"{where}\n" + "\n".join("  " + d for d in diff if not d.startswith(("---", "+++", "@@")))
        )
    if replaced:
        lines = text.split("\n")
        for (start, end), output in reversed(replaced):
            lines[start:end] = output
        path.write_text("\n".join(lines))
    if problems:
        problems.append(
            f"{name}: run `make docs` (python -m tests.docs --update {name}) to rewrite the outputs from a "
            "live run, and review the diff. The daemon's log:\n"
            + "\n".join("  " + line for line in log.splitlines()[-20:])
        )
    return problems
