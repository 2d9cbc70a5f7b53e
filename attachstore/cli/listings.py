"""`attachstore session list` and `attachstore stats`: what a store holds, as a table on a terminal or as
JSON for scripts, from the data dir or, with --url, from a daemon (docs/cli.md#session-list)."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config
from ..text import human_bytes

if TYPE_CHECKING:  # imported where used: the other commands start without the store or the client
    from ..service import Store

EXIT_OK = 0
PAGE = 500  # sessions per page read


def _url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        metavar="URL",
        help="ask this daemon, with $ATTACHSTORE_TOKEN if set (default: none: open the data dir)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON, as the HTTP API answers it")


def add_session_list(actions: Any, common: argparse.ArgumentParser) -> None:
    a = actions.add_parser(
        "list",
        parents=[common],
        help="list the sessions, newest used first",
        description="The tenant's sessions, newest used first: when each was made, last used and expires, "
        "what it holds. --json prints one session a line, as GET /v1/sessions shows it.",
    )
    a.add_argument(
        "--tenant", default="", metavar="NAME", help="the tenant's sessions (default: the open one, '')"
    )
    a.add_argument(
        "--prefix",
        default="",
        metavar="TEXT",
        help="only the sessions whose id starts with it (default: every session)",
    )
    a.add_argument("--expired", action="store_true", help="only the sessions whose lifetime has run out")
    _url(a)


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "stats",
        parents=[common],
        help="the store's totals: objects, bytes, sessions, gc and audit, free space",
        description="The totals of the store (of a tenant, with --tenant): from the data dir, what gc would "
        "collect is counted now; from a daemon (--url), as its last background count found it.",
    )
    s.add_argument(
        "--tenant", default="", metavar="NAME", help="a tenant's figures (default: the whole store)"
    )
    _url(s)


async def _open(config: Config) -> Store:
    from ..service import Store  # the store: only for the commands that run

    return await Store.open(config, workers=1, read_cache=False, policy="none")


def _sessions_local(config: Config, args: argparse.Namespace) -> list[Any]:
    from ..api.listings import summary  # the wire shapes, only where they are printed

    async def run() -> list[Any]:
        store = await _open(config)
        try:
            found: list[Any] = []
            cursor = None
            while True:
                page = await store.listings.sessions(
                    args.tenant, prefix=args.prefix, expired=args.expired or None, cursor=cursor, limit=PAGE
                )
                found += [msgspec.to_builtins(summary(s)) for s in page.items]
                if page.next is None:
                    return found
                cursor = page.next
        finally:
            await store.close()

    return asyncio.run(run())


def _sessions_remote(args: argparse.Namespace) -> list[Any]:
    from ..client import Client

    with Client(args.url) as c:
        listed = c.list_sessions(prefix=args.prefix or None, expired=args.expired or None, page_size=PAGE)
        return [msgspec.to_builtins(s) for s in listed]


def run_session_list(args: argparse.Namespace, config: Config) -> int:
    found = _sessions_remote(args) if args.url else _sessions_local(config, args)
    if args.json:
        for s in found:
            print(msgspec.json.encode(s).decode())
        return EXIT_OK
    print("\n".join(_session_table(found)))
    return EXIT_OK


def _session_table(found: list[dict[str, Any]]) -> Iterator[str]:
    width = max([7, *(len(s["session"]) for s in found)])
    yield f"{'SESSION':<{width}}  {'LAST USED':<20}  {'EXPIRES':<20}  {'IMAGES':>6}  {'BYTES':>10}  ROUTE"
    for s in found:
        used, expires = s["last_used"][:19] + "Z", (s["expires"] or "never")[:19]
        expires += "Z" if s["expires"] else ""
        size, route = human_bytes(s["bytes"]), s["route"] or "-"
        yield f"{s['session']:<{width}}  {used:<20}  {expires:<20}  {s['images']:>6}  {size:>10}  {route}"
    yield f"{len(found)} session{'' if len(found) == 1 else 's'}"


def _stats_local(config: Config, tenant: str) -> dict[str, Any]:
    from ..api.listings import stats_answer

    async def run() -> dict[str, Any]:
        store = await _open(config)
        try:
            now = time.time()
            await store.figures.count(now)
            answer = stats_answer(await store.figures.stats(tenant or None, now), now)
            return dict(msgspec.to_builtins(answer))
        finally:
            await store.close()

    return asyncio.run(run())


def run_stats(args: argparse.Namespace, config: Config) -> int:
    if args.url:
        from ..client import Client

        with Client(args.url) as c:
            figures: dict[str, Any] = dict(msgspec.to_builtins(c.stats()))
    else:
        figures = _stats_local(config, args.tenant)
    if args.json:
        print(msgspec.json.encode(figures).decode())
    else:
        print("\n".join(_stats_table(figures)))
    return EXIT_OK


def _stats_table(f: dict[str, Any]) -> Iterator[str]:
    yield f"scope:            {'tenant ' + f['tenant'] if f.get('tenant') is not None else 'the whole store'}"
    yield f"objects:          {f['objects']} ({human_bytes(f['bytes'])})"
    for media_type, t in sorted(f["by_type"].items()):
        yield f"  {media_type + ':':<16}{t['objects']} ({human_bytes(t['bytes'])})"
    if f["by_source"]:
        sources = ", ".join(
            f"{k} {t['objects']} ({human_bytes(t['bytes'])})" for k, t in f["by_source"].items()
        )
        yield f"admitted from:    {sources}"
    yield f"deduplication:    {human_bytes(f['saved_bytes'])} saved of {human_bytes(f['held_bytes'])} held"
    yield f"quarantined:      {f['quarantined']} (missing {f['missing']})"
    yield f"sessions:         {f['sessions']} ({f['expired_sessions']} expired)"
    if f.get("variants") is not None:
        yield f"variants:         {f['variants']} ({f['previews']} previews)"
    c = f.get("collectible")
    if c is not None:
        yield f"gc would collect: {c['objects']} ({human_bytes(c['bytes'])}), counted {c['counted'][:19]}Z"
    for name in ("last_gc", "last_audit"):
        run = f.get(name)
        if run is not None:
            found = ", ".join(f"{k} {v:g}" for k, v in sorted(run["figures"].items()))
            yield f"{name.replace('_', ' ') + ':':<18}{run['finished'][:19]}Z: {found}"
    if f.get("free_bytes") is not None:
        yield f"free space:       {human_bytes(f['free_bytes'])}"
