"""The `mcp` command: parse, open the backend, serve the MCP server until the client goes away; and
`mcp wrap`, the gate in front of another server, until that server exits."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import ConfigError
from ..loops import loop_factory
from ..vocabulary import SESSION_ID_PATTERN
from .sessions import ttl_seconds

if TYPE_CHECKING:
    from ..mcp import Backend

EXIT_OK = 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "mcp",
        parents=[common],
        help="an MCP server over stdio: the read_image and read_attachment tools; `mcp wrap`: another "
        "server behind the gate",
    )
    _backend_options(s)
    s.add_argument(
        "--workspace",
        action="append",
        default=[],
        metavar="DIR",
        help="read_image reads only under DIR (repeatable; default: the client's roots, else the cwd; over "
        "--http, the client's roots within the cwd)",
    )
    s.add_argument("--session", metavar="ID", help="admit into this session (default: one per process)")
    s.add_argument("--route", metavar="MODEL", help="the model the images are for (default: the session's)")
    s.add_argument(
        "--http", metavar="HOST:PORT", help="serve streamable HTTP on a loopback address (default: stdio)"
    )
    s.add_argument(
        "--structured",
        choices=["auto", "always", "never"],
        default="auto",
        help="structuredContent on read_image results (default: %(default)s, not for hosts that then drop "
        "the image)",
    )
    s.add_argument(
        "--resource-links", action="store_true", help="add a resource_link block to read_image results"
    )
    commands = s.add_subparsers(
        dest="mcp_command",
        metavar="wrap",
        help="`attachstore mcp wrap -h`: another MCP server behind the gate",
    )
    _add_wrap(commands, common)


def _add_wrap(sub: Any, common: argparse.ArgumentParser) -> None:
    w = sub.add_parser(
        "wrap",
        parents=[common],
        help="run another stdio MCP server behind the gate: `attachstore mcp wrap [OPTIONS] -- COMMAND ...`",
        description="Start COMMAND as a stdio MCP server and pass every message on between it and the host "
        "as it came, except that the images of its tools/call and resources/read answers go through the "
        'gate first (docs/mcp.md, "Gate another server").',
    )
    _backend_options(w)
    w.add_argument(
        "--session",
        metavar="ID",
        help="admit into this session (default: one per process, wrap-<command>-<8 hex>)",
    )
    w.add_argument("--route", metavar="MODEL", help="the model the images are for (default: the session's)")
    w.add_argument(
        "--structured",
        choices=["auto", "always", "never"],
        default="auto",
        help="structuredContent of a result whose images were changed: kept (always), dropped (never), or "
        "dropped for Claude Code and Codex, which show it in place of the content (default: %(default)s)",
    )
    w.add_argument(
        "--unsafe-pass-images",
        action="store_true",
        help="UNSAFE: when the store cannot be reached, pass the images on unchecked instead of a text",
    )
    w.add_argument(
        "server", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]", help="the server to start"
    )


def _backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        metavar="URL",
        help="use the daemon at URL (default: $ATTACHSTORE_URL, else the data dir directly)",
    )
    parser.add_argument(
        "--session-ttl",
        metavar="DURATION",
        help="the idle lifetime of the session this process makes, e.g. 30d, 12h; 0s: none (default: the "
        "configuration's [mcp] session_ttl, else 30d)",
    )


def run(args: argparse.Namespace, config: Config) -> int:
    if args.mcp_command == "wrap":
        return _wrap(args, config)
    from .. import mcp  # here, not at the top: the other commands need none of the MCP SDK

    session = _session(args.session or f"mcp-{secrets.token_hex(8)}")
    try:
        fixed = [mcp.directory(d) for d in args.workspace]
    except ValueError as e:
        raise ConfigError(f"--workspace: {e}") from None
    where = _address(args.http, mcp.loopback) if args.http else None
    backend = _backend(args, config, session)
    roots = mcp.Roots(fixed, cache=where is None, confined=where is not None)
    server = mcp.build(backend, roots, mcp.Options(args.structured, args.resource_links))
    if where is None:
        asyncio.run(mcp.stdio(server, backend))
    else:
        asyncio.run(mcp.http(server, backend, *where))
    return EXIT_OK


def _wrap(args: argparse.Namespace, config: Config) -> int:
    from .. import mcp  # the wrapper's modules only: the SDK is not imported (mcp/__init__.py)

    command = args.server[1:] if args.server[:1] == ["--"] else args.server
    if not command:
        raise ConfigError(
            "mcp wrap: name the server to start after --, as in "
            "`attachstore mcp wrap --route MODEL -- npx -y @modelcontextprotocol/server-everything`"
        )
    session = _session(args.session or f"wrap-{_named(command[0])}-{secrets.token_hex(4)}")
    gate = mcp.Gate(_backend(args, config, session), unsafe_pass=args.unsafe_pass_images)
    # The daemon's loop: each message is a pipe's hop each way through it.
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(mcp.wrapped(command, gate, mcp.WrapOptions(args.structured)))


def _session(session: str) -> str:
    if not re.fullmatch(SESSION_ID_PATTERN, session):
        raise ConfigError(f"--session: not a session id: {session[:140]!r} (1 to 128 of A-Z a-z 0-9 . _ : -)")
    return session


def _named(command: str) -> str:
    # The command's name, in the letters a session id may hold: `wrap-npx-…`, `wrap-server.py-…`.
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(command)).strip(".-")[:48]
    return name or "server"


def _backend(args: argparse.Namespace, config: Config, session: str) -> Backend:
    from .. import mcp

    ttl = config.mcp.session_ttl_seconds
    if args.session_ttl is not None:
        ttl = None if args.session_ttl in ("0", "0s") else ttl_seconds(args.session_ttl, "--session-ttl")
    url = args.url or os.environ.get("ATTACHSTORE_URL") or None
    if not url:
        return mcp.Local(config, session, args.route, ttl=ttl)
    try:
        return mcp.Remote(url, os.environ.get("ATTACHSTORE_TOKEN") or None, session, args.route, ttl)
    except ValueError as e:
        raise ConfigError(f"--url: {e}") from None


def _address(text: str, loopback: Callable[[str], bool]) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--http: not HOST:PORT: {text!r}")
    if not loopback(host):
        raise ConfigError(
            f"--http: {host!r} is not a loopback address; the MCP server reads the workspace for whoever "
            "connects, so it listens only on 127.0.0.1, ::1 or localhost"
        )
    return host, int(port)
