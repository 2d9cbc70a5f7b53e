"""The `mcp` command: parse, open the backend, serve the MCP server until the client goes away."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..errors import ConfigError
from ..vocabulary import SESSION_ID_PATTERN

EXIT_OK = 0


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "mcp", parents=[common], help="an MCP server over stdio: the read_image and read_attachment tools"
    )
    s.add_argument(
        "--url",
        metavar="URL",
        help="use the daemon at URL (default: $ATTACHSTORE_URL, else the data dir directly)",
    )
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


def run(args: argparse.Namespace, config: Config) -> int:
    from .. import mcp  # here, not at the top: the other commands need none of the MCP SDK

    session = args.session or f"mcp-{secrets.token_hex(8)}"
    if not re.fullmatch(SESSION_ID_PATTERN, session):
        raise ConfigError(f"--session: not a session id: {session[:140]!r} (1 to 128 of A-Z a-z 0-9 . _ : -)")
    try:
        fixed = [mcp.directory(d) for d in args.workspace]
    except ValueError as e:
        raise ConfigError(f"--workspace: {e}") from None
    where = _address(args.http, mcp.loopback) if args.http else None
    url = args.url or os.environ.get("ATTACHSTORE_URL") or None
    backend: mcp.Backend
    if url:
        try:
            backend = mcp.Remote(url, os.environ.get("ATTACHSTORE_TOKEN") or None, session, args.route)
        except ValueError as e:
            raise ConfigError(f"--url: {e}") from None
    else:
        backend = mcp.Local(config, session, args.route)
    roots = mcp.Roots(fixed, cache=where is None, confined=where is not None)
    server = mcp.build(backend, roots, mcp.Options(args.structured, args.resource_links))
    if where is None:
        asyncio.run(mcp.stdio(server, backend))
    else:
        asyncio.run(mcp.http(server, backend, *where))
    return EXIT_OK


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
