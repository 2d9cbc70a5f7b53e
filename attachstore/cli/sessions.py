"""The `session` command: create, show, route, fork, hold and delete a session; release the expired ones."""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config, parse_duration
from ..errors import ConfigError
from ..text import rfc3339
from ..vocabulary import MAX_SESSION_TTL
from . import listings

if TYPE_CHECKING:  # imported where used, as in main.py
    from ..index import SessionRow
    from ..service import Store

EXIT_OK = 0

_ARGUMENTS = {
    "id": "the session's id: 1 to 128 of A-Z a-z 0-9 . _ : -",
    "route": "the model to switch to",
    "new_id": "the id of the copy",
    "refs": "the attachments to hold, all or none",
}


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s: argparse.ArgumentParser = sub.add_parser(
        "session", parents=[common], help="create, show, list, fork, hold, delete and release sessions"
    )
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str, *positionals: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, parents=[common], help=help)
        a.add_argument(
            "--tenant", default="", metavar="NAME", help="the tenant's sessions (default: the open one, '')"
        )
        for positional in positionals:
            if positional == "refs":
                a.add_argument(positional, nargs="+", metavar="REF", help=_ARGUMENTS[positional])
            else:
                a.add_argument(positional, metavar=positional.upper(), help=_ARGUMENTS[positional])
        return a

    create = action("create", "create a session (the same route again is a no-op)", "id")
    create.add_argument("--route", metavar="MODEL", help="the model the session is on (default: none)")
    create.add_argument(
        "--ttl",
        metavar="DURATION",
        help="its idle lifetime, renewed by every use, e.g. 30d, 12h (default: none, kept until deleted; "
        "given to an existing session, it replaces its own)",
    )
    action("show", "print a session as JSON", "id")
    action("route", "switch the route (refused to a text-only one while it holds images)", "id", "route")
    action("fork", "copy a session and its holds to a new id", "id", "new_id")
    action("hold", "hold existing attachments in a session", "id", "refs")
    action("delete", "release a session's holds and forget it", "id")
    release = actions.add_parser(
        "release", parents=[common], help="release every tenant's expired sessions now, as gc would"
    )
    release.add_argument("--expired", action="store_true", required=True, help="the expired sessions")
    release.add_argument("--dry-run", action="store_true", help="print them, release nothing")
    listings.add_session_list(actions, common)


def ttl_seconds(text: str | None, option: str = "--ttl") -> int | None:
    """A duration as the configuration writes them, in whole seconds (1 second to 10 years)."""
    if text is None:
        return None
    try:
        seconds = round(parse_duration(text))
    except ValueError:
        raise ConfigError(f"{option}: not a duration: {text!r} (e.g. 30d, 12h, 90m)") from None
    if not 0 < seconds <= MAX_SESSION_TTL:
        raise ConfigError(f"{option}: {text!r}: a lifetime is 1 second to 3650 days")
    return seconds


def shown(s: SessionRow) -> dict[str, Any]:
    """As GET /v1/sessions/{id} answers it."""
    return {
        "session": s.id,
        "route": s.route,
        "holds": s.holds,
        "created": rfc3339(s.created_at),
        "ttl": s.ttl,
        "last_used": rfc3339(s.used_at),
        "expires": None if s.expires_at is None else rfc3339(s.expires_at),
    }


def run(args: argparse.Namespace, config: Config) -> int:
    if args.action == "list":
        return listings.run_session_list(args, config)
    ttl = ttl_seconds(getattr(args, "ttl", None))

    async def action(store: Store) -> object:
        sessions = store.sessions
        if args.action == "release":
            return await _release(store, args.dry_run)
        key = (args.tenant, args.id)
        if args.action == "create":
            return shown((await sessions.create(key, args.route, ttl))[0])
        if args.action == "show":
            return shown(await sessions.get(key))
        if args.action == "route":
            return shown(await sessions.switch_route(key, args.route))
        if args.action == "fork":
            return shown(await sessions.fork(key, args.new_id))
        if args.action == "hold":
            return shown(await sessions.hold(key, args.refs))
        return {"session": args.id, "released": await sessions.delete(key)}

    print(msgspec.json.encode(asyncio.run(_with_store(config, action))).decode())
    return EXIT_OK


async def _release(store: Store, dry_run: bool) -> dict[str, Any]:
    def one(s: SessionRow, holds: int | None) -> dict[str, Any]:
        expired = rfc3339(s.expires_at or 0.0)
        return {"tenant": s.tenant, "session": s.id, "expired": expired, "released": holds}

    if dry_run:
        found = [one(s, None) for s in await store.sessions.expired()]
    else:
        found = [one(s, holds) for s, holds in await store.sessions.release_expired()]
    return {"dry_run": dry_run, "sessions": found}


async def _with_store(config: Config, action: Any) -> object:
    from ..service import Store  # the store, the gate and Pillow: only for the commands that open one

    store = await Store.open(config, workers=1, read_cache=False)
    try:
        return await action(store)
    finally:
        await store.close()
