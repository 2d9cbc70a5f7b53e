"""The files shipped with the package for an operator: `config example` prints the example configuration,
`deploy systemd` writes the units with `ExecStart` naming this very installation."""

from __future__ import annotations

import argparse
import shlex
import sys
from importlib import resources
from pathlib import Path
from typing import Any

SHIPPED = resources.files("attachstore") / "shipped"
EXAMPLE = "attachstore.example.toml"
UNITS = ("attachstore.service", "attachstore-gc.service", "attachstore-gc.timer")
SHIPPED_COMMAND = "/usr/local/bin/attachstore"  # what the shipped units name until `deploy systemd` fills in


def add_parsers(sub: Any) -> None:
    c = sub.add_parser("config", help="the example configuration (every key, its default, a comment on each)")
    c.add_argument("what", choices=["example"], help="example: print it, to redirect into a file")
    d = sub.add_parser(
        "deploy", help="write the systemd units of the daemon and of gc, for this installation of attachstore"
    )
    d.add_argument(
        "what", choices=["systemd"], help="systemd: attachstore.service and the gc service and timer"
    )
    d.add_argument(
        "--dir",
        metavar="DIR",
        default="/etc/systemd/system",
        help="where to write them (default: %(default)s); an existing unit of the same name is replaced",
    )


def text(name: str) -> str:
    return (SHIPPED / name).read_text(encoding="utf-8")


def command() -> str:
    """This installation's `attachstore`, as an absolute path: the script that runs now, else this Python
    with `-m attachstore`."""
    script = Path(sys.argv[0])
    if script.name == "attachstore" and script.is_file():
        return shlex.quote(str(script.absolute()))
    return f"{shlex.quote(sys.executable)} -m attachstore"


def run(args: argparse.Namespace) -> int:
    if args.command == "config":
        sys.stdout.write(text(EXAMPLE))
        return 0
    where = Path(args.dir)
    where.mkdir(parents=True, exist_ok=True)
    for name in UNITS:
        (where / name).write_text(text(name).replace(SHIPPED_COMMAND, command()), encoding="utf-8")
        print(f"wrote {where / name}")
    print("next: systemctl daemon-reload && systemctl enable --now attachstore attachstore-gc.timer")
    return 0
