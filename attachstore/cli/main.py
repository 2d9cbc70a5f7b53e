"""The command line: parse, call the service, print. Errors become a message and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import secrets
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from .. import __version__, logs
from ..config import Config, default_data_dir, load
from ..cores import cores
from ..errors import AttachstoreError, ConfigError, IndexUnusable, InvalidRequest
from ..vocabulary import SOURCES
from . import listings, maintenance, mcp, routes, sessions, shipped, transcript

if TYPE_CHECKING:  # imported where used: the commands that need no store (`mcp`, `token`) start without it
    from ..service import Admission, ImageRef, Store, Upload

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
TENANT_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
T = TypeVar("T")


def _store_options(parser: argparse.ArgumentParser, default: object) -> argparse.ArgumentParser:
    """The subcommands' copies of --config and --data-dir default to SUPPRESS, so that they do not overwrite a
    value given before the command (the last one given wins). The help shows the defaults as they resolve
    here."""

    def now(var: str) -> str:
        return f" (now {os.environ[var]})" if os.environ.get(var) else ""

    parser.add_argument(
        "--config",
        metavar="FILE",
        default=default,
        help=f"TOML configuration file (default: $ATTACHSTORE_CONFIG{now('ATTACHSTORE_CONFIG')}, else none: "
        "every key has a default)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=default,
        help=f"the store's directory (default: $ATTACHSTORE_DATA_DIR{now('ATTACHSTORE_DATA_DIR')}, else the "
        f"configuration's data_dir, else {default_data_dir(os.environ)} ($XDG_DATA_HOME/attachstore))",
    )
    return parser


def _parser() -> argparse.ArgumentParser:
    common = _store_options(argparse.ArgumentParser(add_help=False), argparse.SUPPRESS)

    p = argparse.ArgumentParser(
        prog="attachstore",
        description="A verified attachment store for agent hosts. --config and --data-dir go before the "
        "command or after it; `attachstore COMMAND -h` tells each command's options.",
    )
    p.add_argument("--version", action="version", version=f"attachstore {__version__}")
    _store_options(p, None)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The order here is the order of the commands in the help.
    _add_serve(sub, common)
    _add_put_get_stat(sub, common)
    maintenance.add_parsers(sub, common)
    listings.add_parsers(sub, common)
    routes.add_parsers(sub, common)
    mcp.add_parsers(sub, common)
    transcript.add_parsers(sub, common)
    _add_token(sub)
    sessions.add_parsers(sub, common)
    shipped.add_parsers(sub)
    return p


def _add_serve(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("serve", parents=[common], help="run the HTTP daemon")
    s.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="TCP address (default: $ATTACHSTORE_LISTEN, else the configuration's listen, else "
        "127.0.0.1:8731); IPv6 as [::1]:8731",
    )
    s.add_argument(
        "--unix-socket", metavar="PATH", help="listen on this Unix socket instead of TCP (default: none)"
    )
    s.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="serve from N processes (default: one per core; 1 serves from this process alone)",
    )
    s.add_argument(
        "--replace-policy",
        action="store_true",
        help="make this configuration's policy the store's even while other nodes enforce another",
    )


def _add_put_get_stat(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("put", parents=[common], help="admit image files, print their references")
    s.add_argument(
        "files", nargs="+", metavar="FILE", help="image files, admitted as one batch (all or none)"
    )
    s.add_argument(
        "--source",
        choices=SOURCES,
        default="user",
        help="where the images come from (default: %(default)s); a rejection of tool and mcp images is soft",
    )
    s.add_argument(
        "--media-type",
        metavar="TYPE",
        help="declared type of every file, checked against the bytes (default: found from the bytes)",
    )
    s.add_argument(
        "--route",
        metavar="MODEL",
        help="the model the images are for, for the modality policy (default: the session's route)",
    )
    s.add_argument("--session", metavar="ID", help="hold the images in this session (default: none)")
    s.add_argument(
        "--tenant", default="", metavar="NAME", help="admit for this tenant (default: the open one, '')"
    )
    printed = s.add_mutually_exclusive_group()
    printed.add_argument("--json", action="store_true", help="print the answer as JSON")
    printed.add_argument(
        "--ref-only", action="store_true", help="print only the refs, one a line: REF=$(attachstore put ...)"
    )

    s = sub.add_parser("get", parents=[common], help="write an attachment's verified bytes")
    s.add_argument("ref", metavar="REF", help="the attachment's reference, sha256:<64 hex>")
    s.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write here, - for standard output (default: standard output, unless it is a terminal)",
    )

    s = sub.add_parser("stat", parents=[common], help="print an attachment's metadata as JSON")
    s.add_argument("ref", metavar="REF", help="the attachment's reference, sha256:<64 hex>")


def _add_token(sub: Any) -> None:
    s = sub.add_parser("token", help="make bearer tokens for tenants (reads no configuration)")
    s.add_argument("action", choices=["new"], help="new: make a token and print the lines to configure")
    s.add_argument("--tenant", required=True, metavar="NAME", help="the tenant the token belongs to")


def _config(args: argparse.Namespace) -> Config:
    overrides = {
        "data_dir": getattr(args, "data_dir", None),
        "listen": getattr(args, "listen", None),
        "unix_socket": getattr(args, "unix_socket", None),
    }
    return load(getattr(args, "config", None), overrides=overrides)


async def _with_store(config: Config, action: Callable[[Store], Awaitable[T]], *, policy: bool = True) -> T:
    """With `policy`, the command applies the store's routes and limits: the daemon's, as it recorded them
    (or, given a configuration that declares its own, refuses unless they are the same)."""
    from ..service import Store  # the store, the gate and Pillow: only for the commands that open one

    # One decode worker: a local command admits a handful of files, and the daemon may be busy beside it.
    store = await Store.open(config, workers=1, read_cache=False, policy="apply" if policy else "none")
    try:
        return await action(store)
    finally:
        await store.close()


def _read_files(paths: Sequence[str], media_type: str | None) -> list[Upload]:
    from ..service import Upload  # as in _with_store

    uploads = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise InvalidRequest(f"{path}: {e.strerror}") from None
        uploads.append(Upload.of_bytes(data, media_type, os.path.basename(path)))
    return uploads


def _line(r: ImageRef) -> str:
    frames = f", {r.frames} frames" if r.frames > 1 else ""
    was = ""
    if r.normalized is not None:
        o = r.normalized.original
        was = f" (was {o.media_type} {o.width}x{o.height}, {o.bytes} bytes: {', '.join(r.normalized.steps)})"
    return (
        f"{r.ref}  {r.media_type} {r.width}x{r.height}{frames}, {r.bytes} bytes{was}  {r.name or ''}".rstrip()
    )


def _cmd_put(args: argparse.Namespace, config: Config) -> int:
    uploads = _read_files(args.files, args.media_type)

    async def action(store: Store) -> Admission:
        return await store.admit(
            uploads, args.source, route=args.route, session=args.session, tenant=args.tenant
        )

    result = asyncio.run(_with_store(config, action))
    if args.json:
        from ..api.attachments import attachment  # the HTTP stack, only where its wire shape is printed

        answer: dict[str, object] = {"attachments": [attachment(r) for r in result.attachments]}
        if result.degraded:
            answer |= {"degraded": True, "diagnostics": result.diagnostics, "text": result.text}
        print(msgspec.json.encode(answer).decode())
    elif result.degraded:
        print(f"attachstore: nothing admitted (degraded): {result.text}", file=sys.stderr)
    for r in [] if args.json else result.attachments:
        print(r.ref if args.ref_only else _line(r))
    return EXIT_FAILED if result.degraded else EXIT_OK


def _cmd_get(args: argparse.Namespace, config: Config) -> int:
    if args.output is None and sys.stdout.isatty():
        raise InvalidRequest("refusing to write image bytes to a terminal; use -o FILE")

    async def action(store: Store) -> bytes | bytearray:
        _, data = await store.read(args.ref)
        return data

    data = asyncio.run(_with_store(config, action, policy=False))
    if args.output in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(args.output).write_bytes(data)
    return EXIT_OK


def _cmd_stat(args: argparse.Namespace, config: Config) -> int:
    async def action(store: Store) -> int:
        from ..api.attachments import attachment

        print(msgspec.json.encode(attachment(await store.meta(args.ref))).decode())
        return EXIT_OK

    return asyncio.run(_with_store(config, action, policy=False))


def _cmd_token(args: argparse.Namespace, config: Config) -> int:
    if not TENANT_NAME.fullmatch(args.tenant):
        raise InvalidRequest("--tenant: 1 to 64 letters, digits and . _ -")
    token = "ast_" + secrets.token_urlsafe(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    print(f"token: {token}")
    print("# Give the token to the agent host (Authorization: Bearer <token>); it is not stored anywhere.")
    print("# Add these lines to the configuration and restart the daemon:")
    print(f'[[tenants]]\nname = "{args.tenant}"\ntoken_sha256 = "{digest}"')
    return EXIT_OK


def _cmd_serve(args: argparse.Namespace, config: Config) -> int:
    logs.setup()
    if args.workers is not None and args.workers < 1:
        raise InvalidRequest("--workers: at least 1")
    from .. import server  # aiohttp and the app: only `serve` pays for importing them

    workers = cores() if args.workers is None else args.workers
    return server.run(config, workers, replace_policy=args.replace_policy)


COMMANDS: dict[str, Callable[[argparse.Namespace, Config], int]] = {
    "serve": _cmd_serve,
    "put": _cmd_put,
    "get": _cmd_get,
    "stat": _cmd_stat,
    "session": sessions.run,
    "token": _cmd_token,
    "stats": listings.run_stats,
    "gc": maintenance.run_gc,
    "audit": maintenance.run_audit,
    "migrate": maintenance.run_migrate,
    "routes": routes.run,
    "mcp": mcp.run,
    "transcript": transcript.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "tenant", "") and not TENANT_NAME.fullmatch(args.tenant):
            raise InvalidRequest("--tenant: 1 to 64 letters, digits and . _ -, as in [[tenants]] name")
        if args.command == "token":  # makes a token; reads no configuration
            return _cmd_token(args, load(None, env={}))
        if args.command in ("config", "deploy"):  # print or write shipped files; read no configuration
            return shipped.run(args)
        config = _config(args)
        return COMMANDS[args.command](args, config)
    except (ConfigError, IndexUnusable) as e:
        print(f"attachstore: {e}", file=sys.stderr)
        return EXIT_USAGE
    except AttachstoreError as e:
        where = f" (image {e.index})" if e.index is not None else ""
        print(f"attachstore: {e.code}{where}: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"  hint: {e.hint}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        print(f"attachstore: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
