"""One policy per store (docs/configuration.md#one-policy-per-store): a daemon records its own (or refuses
while a live node enforces another); a command adopts the record, or refuses when it declares another."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..config import Admission, Config, Limits, Route
from ..index import Index, PolicyRecord
from .catalog import Catalog, CatalogError, builtin
from .node import Node, node_row
from .policydoc import (
    PolicyMismatch,
    declares_policy,
    describe,
    differences,
    document,
    encode,
    fingerprint,
    who,
)

log = logging.getLogger("attachstore.policy")

Role = Literal["serve", "apply", "none"]  # a daemon, a command that applies the policy, one that applies none


@dataclass(frozen=True, slots=True)
class Applied:
    config: Config
    catalog: Catalog
    fingerprint: str
    record: PolicyRecord | None = None
    node: Node | None = None


def own_policy(config: Config) -> Applied:
    return Applied(config, builtin(), fingerprint(encode(document(config, builtin()))))


async def take_policy(config: Config, index: Index, role: Role, *, replace: bool = False) -> Applied:
    if role == "none":
        return own_policy(config)
    if role == "serve":
        node = Node(index, node_row(encode(document(config, builtin()))))
        await node.join(replace)
        _warn_of_blind_routes(config, builtin())
        return Applied(config, builtin(), node.row.fingerprint, node=node)
    record = await index.policy()
    if record is None:  # no daemon has served the store: nothing to agree with
        return own_policy(config)
    recorded = _parse(record)
    store_catalog = _catalog_of(recorded, record)
    if not declares_policy(config):
        return Applied(_adopt(config, recorded, record), store_catalog, record.fingerprint, record)
    # Its own configuration: with the store's catalog (the daemon's), it must come to the record.
    mine = document(config, store_catalog)
    if fingerprint(encode(mine)) == record.fingerprint:
        return Applied(config, store_catalog, record.fingerprint, record)
    changes = describe(differences(recorded, mine, "in the store's policy"))
    raise PolicyMismatch(
        f"this command's configuration differs from the policy of the store, as {who(record)} recorded it: "
        f"{changes}. Run it with the daemon's configuration, or with one that declares no routes and leaves "
        "[limits] and [admission] at their defaults, to apply the store's policy"
    )


def _warn_of_blind_routes(config: Config, catalog: Catalog) -> None:
    """A configured route replaces the catalog's entry whole: one declared without "image" makes a model the
    catalog knows to see images text-only."""
    for rid, route in sorted(config.routes.items()):
        found = catalog.lookup(rid)
        if found and "image" in found.entry.input_modalities and "image" not in route.input_modalities:
            log.warning(
                "routes.%s is text-only, but the built-in catalog says the model takes images (entry %s): "
                'if it does, declare input_modalities = ["text", "image"] in it',
                json.dumps(rid),
                found.entry.key,
            )


def _parse(record: PolicyRecord) -> dict[str, Any]:
    try:
        found = json.loads(record.document)
    except ValueError as e:
        raise PolicyMismatch(f"the store's recorded policy is not valid JSON: {e}") from None
    if not isinstance(found, dict):
        raise PolicyMismatch("the store's recorded policy is not a JSON object")
    return found


def _unreadable(record: PolicyRecord, e: Exception) -> PolicyMismatch:
    return PolicyMismatch(
        f"the store's policy, as {who(record)} recorded it, cannot be applied by this attachstore ({e}): "
        "upgrade attachstore to the daemon's version"
    )


def _catalog_of(recorded: dict[str, Any], record: PolicyRecord) -> Catalog:
    try:
        return Catalog.of_document(recorded.get("catalog"))
    except (msgspec.ValidationError, CatalogError) as e:
        raise _unreadable(record, e) from None


def _adopt(config: Config, recorded: dict[str, Any], record: PolicyRecord) -> Config:
    try:
        routes = msgspec.convert(recorded["routes"], dict[str, Route])
        limits = msgspec.convert(recorded["limits"], Limits)
        admission = msgspec.convert(
            {**msgspec.to_builtins(config.admission), **recorded["admission"]}, Admission
        )
    except (KeyError, TypeError, msgspec.ValidationError) as e:
        raise _unreadable(record, e) from None
    return msgspec.structs.replace(config, routes=routes, limits=limits, admission=admission)
