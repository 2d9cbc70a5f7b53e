"""The `routes` command: every declaration of a model and where it comes from, or how one model id resolves,
under the policy the store applies (docs/cli.md#routes)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config
from ..text import rfc3339

if TYPE_CHECKING:  # imported where used: the other commands, `mcp` first, start without the store
    from ..service import Applied, Declaration, RouteTable

EXIT_OK = 0
_ID_WIDTH = 40


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser(
        "routes",
        parents=[common],
        help="list the routes and catalog entries, or show how a model id resolves",
        description="Without MODEL: the configured routes, then the built-in catalog's entries, each with "
        "where its declaration comes from. With MODEL: the declaration that decides for that model id.",
    )
    s.add_argument("model", nargs="?", metavar="MODEL", help="a model id, as hosts name it in `route`")
    s.add_argument("--json", action="store_true", help="print what GET /v1/routes[/MODEL] answers")


async def _policy(config: Config) -> tuple[RouteTable, Applied]:
    """The store's policy, as every local command applies it; this configuration's own when there is no
    store at the data dir yet (nothing is created to answer)."""
    from ..service import RouteTable, Store, own_policy  # the store: only for the command that runs

    if config.index.backend == "sqlite" and not (Path(config.data_dir) / "index.sqlite3").exists():
        applied = own_policy(config)
        return RouteTable(applied.config.routes, applied.catalog), applied
    store = await Store.open(config, workers=1, read_cache=False)
    try:
        return store.routes, store.policy or own_policy(config)
    finally:
        await store.close()


def run(args: argparse.Namespace, config: Config) -> int:
    from ..api.routes import listing, resolution  # the wire shapes, only where they are printed

    routes, applied = asyncio.run(_policy(config))
    if args.json:
        answer = resolution(routes, args.model) if args.model else listing(routes, applied.fingerprint)
        print(msgspec.json.encode(answer).decode())
    elif args.model:
        print("\n".join(_resolution(routes, args.model)))
    else:
        print("\n".join(_table(routes, applied)))
    return EXIT_OK


def _modalities(d: Declaration) -> str:
    return ", ".join(d.route.input_modalities)


def _origin(d: Declaration) -> str:
    if d.by == "catalog":
        return "catalog"
    return f"config (replaces catalog {d.replaces})" if d.replaces else "config"


def _table(routes: RouteTable, applied: Applied) -> list[str]:
    declared = routes.listing()
    width = min(_ID_WIDTH, max((len(d.entry) for d in declared), default=5))
    lines = [f"{'ROUTE':<{width}}  {'INPUT':<11}  {'PROVIDER':<16}  DECLARED BY"]
    for d in declared:
        lines.append(f"{d.entry:<{width}}  {_modalities(d):<11}  {d.route.provider or '-':<16}  {_origin(d)}")
    configured = len(routes.configured)
    lines.append(
        f"{configured} route{'' if configured == 1 else 's'} of the configuration over "
        f"{len(routes.catalog.entries)} entries of the built-in catalog {routes.catalog.version}; "
        f"policy {applied.fingerprint[:19]}, {_whose(applied)}"
    )
    return lines


def _whose(applied: Applied) -> str:
    if applied.record is None:
        return "this configuration's own (no daemon has recorded the store's)"
    r = applied.record
    return f"the store's, as the daemon {r.recorded_by} recorded it at {rfc3339(r.recorded_at, 'seconds')}"


def _resolution(routes: RouteTable, model: str) -> list[str]:
    d = routes.declaration(model)
    version = routes.catalog.version
    if d is None:
        declare = f'[routes.{json.dumps(model)}] with input_modalities = ["text", "image"], or ["text"]'
        return [
            f"model:        {model}",
            "images:       unknown: uploads are admitted, tool and MCP images are not",
            f"declared by:  nothing (neither the configuration nor the built-in catalog {version})",
            f"declare it:   {declare}",
        ]
    if d.accepts_images:
        images = "accepted, from every source"
    else:
        images = (
            "not accepted: uploads are refused, tool images dropped, no session holding images moves to it"
        )
    if d.by == "config":
        by = f"the configuration, [routes.{json.dumps(d.entry)}]"
        by += f" (replacing catalog entry {d.replaces})" if d.replaces else ""
    else:
        by = f"the built-in catalog {version}, entry {d.entry}"
        by += f" (matched as {d.matched})" if d.matched != d.entry else ""
    provider = d.route.provider or "none (the render request names it)"
    lines = [
        f"model:        {model}",
        f"images:       {images}",
        f"declared by:  {by}",
        f"provider:     {provider}",
    ]
    if d.source:
        lines.append(f"source:       {d.source}")
    return lines
