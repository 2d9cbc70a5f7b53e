"""The command line: parse, call the service, print. Errors become a message and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec

from . import __version__
from .config import Config, load
from .errors import AttachstoreError, ConfigError
from .index import IndexUnusable
from .server import serve
from .service import SOURCES, ImageRef, Store, Upload

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
T = TypeVar("T")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help="TOML configuration file (else $ATTACHSTORE_CONFIG)")
    common.add_argument("--data-dir", metavar="DIR", help="data directory (else $ATTACHSTORE_DATA_DIR)")

    p = argparse.ArgumentParser(
        prog="attachstore", description="A verified attachment store for agent hosts."
    )
    p.add_argument("--version", action="version", version=f"attachstore {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("serve", parents=[common], help="run the HTTP daemon")
    s.add_argument("--listen", metavar="HOST:PORT", help="TCP address (default 127.0.0.1:8731)")
    s.add_argument("--unix-socket", metavar="PATH", help="listen on a Unix socket instead of TCP")

    s = sub.add_parser("put", parents=[common], help="admit image files, print their references")
    s.add_argument("files", nargs="+", metavar="FILE", help="image files, admitted as one batch")
    s.add_argument("--source", choices=SOURCES, default="user")
    s.add_argument("--media-type", metavar="TYPE", help="declared type, checked against the bytes")
    s.add_argument("--json", action="store_true", help="print the answer as JSON")

    s = sub.add_parser("get", parents=[common], help="write an attachment's verified bytes")
    s.add_argument("ref")
    s.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")

    s = sub.add_parser("stat", parents=[common], help="print an attachment's metadata as JSON")
    s.add_argument("ref")
    return p


def _config(args: argparse.Namespace) -> Config:
    overrides = {
        "data_dir": args.data_dir,
        "listen": getattr(args, "listen", None),
        "unix_socket": getattr(args, "unix_socket", None),
    }
    return load(args.config, overrides=overrides)


async def _with_store(config: Config, action: Callable[[Store], Awaitable[T]]) -> T:
    # One decode worker: a local command admits a handful of files, and the daemon may be busy beside it.
    store = await Store.open(config, workers=1)
    try:
        return await action(store)
    finally:
        await store.close()


def _read_files(paths: Sequence[str], media_type: str | None) -> list[Upload]:
    uploads = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise AttachstoreError(f"{path}: {e.strerror}", code="INVALID_REQUEST") from None
        uploads.append(Upload.of_bytes(data, media_type, os.path.basename(path)))
    return uploads


def _line(r: ImageRef) -> str:
    frames = f", {r.frames} frames" if r.frames > 1 else ""
    return f"{r.ref}  {r.media_type} {r.width}x{r.height}{frames}, {r.bytes} bytes  {r.name or ''}".rstrip()


def _cmd_put(args: argparse.Namespace, config: Config) -> int:
    uploads = _read_files(args.files, args.media_type)

    async def action(store: Store) -> int:
        refs = await store.admit(uploads, args.source)
        if args.json:
            print(msgspec.json.encode({"attachments": refs}).decode())
        else:
            for r in refs:
                print(_line(r))
        return EXIT_OK

    return asyncio.run(_with_store(config, action))


def _cmd_get(args: argparse.Namespace, config: Config) -> int:
    if args.output is None and sys.stdout.isatty():
        raise AttachstoreError(
            "refusing to write image bytes to a terminal; use -o FILE", code="INVALID_REQUEST"
        )

    async def action(store: Store) -> bytes:
        _, data = await store.read(args.ref)
        return data

    data = asyncio.run(_with_store(config, action))
    if args.output in (None, "-"):
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        Path(args.output).write_bytes(data)
    return EXIT_OK


def _cmd_stat(args: argparse.Namespace, config: Config) -> int:
    async def action(store: Store) -> int:
        print(msgspec.json.encode(await store.meta(args.ref)).decode())
        return EXIT_OK

    return asyncio.run(_with_store(config, action))


def _cmd_serve(args: argparse.Namespace, config: Config) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(config))
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace, Config], int]] = {
    "serve": _cmd_serve,
    "put": _cmd_put,
    "get": _cmd_get,
    "stat": _cmd_stat,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
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
