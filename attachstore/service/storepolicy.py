"""One policy per store (SPEC section 6, docs/configuration.md#one-policy-per-store).

A process's policy is the routes of its configuration over the catalog and the keys that decide what is
admitted ([limits] and [admission] but for how the process runs): one JSON document with a fingerprint. A
daemon records its own in the index as it starts, and sends a heartbeat there as a node, so that:

- a daemon that finds a live node enforcing another policy refuses to start, naming the keys that differ,
  unless told to replace it; with no such node its policy replaces the record (a restart with a new
  configuration is the operator's act). A node whose policy is no longer the record reports not ready.
- a command (the CLI's local commands) applies the record: exactly, when its configuration declares no
  policy of its own; and when it does, only if that is the record's, else it refuses, naming the keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..config import Admission, Config, Limits, Route
from ..errors import AttachstoreError, ConfigError, StorageUnavailable
from ..index import Index, NodeRow, PolicyRecord
from ..progress import rfc3339
from . import liveness
from .catalog import Catalog, CatalogError, builtin
from .liveness import Process

log = logging.getLogger("attachstore.policy")

Role = Literal["serve", "apply", "none"]  # a daemon, a command that applies the policy, one that applies none
HEARTBEAT_SECONDS = 5.0
NODE_TTL = 30.0  # a node of another host not seen for this long is gone
LOCAL_TTL = 600.0  # one of this host is gone when its process is, or (a reused pid) not seen for this long
STOPPING_TTL = 60.0  # a node of another host that began to stop this long ago is gone (a shutdown is 30 s)
STOPPING_WAIT = 40.0  # a starting daemon waits this long for nodes that stop (longer than a shutdown)
STOPPING_POLL = 0.1
# [admission] keys that say how a process runs, not what it admits: not part of the policy.
_OPERATIONAL = frozenset(
    {
        "decode_workers",
        "decode_timeout",
        "request_decode_timeout",
        "max_concurrent",
        "max_concurrent_per_tenant",
        "max_buffered_bytes",
        "max_derivations_per_tenant",
    }
)
_SHOWN = 8  # differences named in a message; the rest are counted


class PolicyMismatch(ConfigError):
    """This process's policy is not the store's, and it may not apply it."""


def document(config: Config, catalog: Catalog) -> dict[str, Any]:
    return {
        "catalog": catalog.document(),
        "routes": {k: msgspec.to_builtins(config.routes[k]) for k in sorted(config.routes)},
        "limits": msgspec.to_builtins(config.limits),
        "admission": _admission_keys(config.admission),
    }


def _admission_keys(admission: Admission) -> dict[str, Any]:
    return {k: v for k, v in msgspec.to_builtins(admission).items() if k not in _OPERATIONAL}


def encode(doc: dict[str, Any]) -> str:
    return msgspec.json.encode(doc, order="sorted").decode()


def fingerprint(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def declares_policy(config: Config) -> bool:
    """Whether the configuration says anything the policy is made of: a route, or a limit or admission key
    other than its default."""
    return (
        bool(config.routes)
        or config.limits != Limits()
        or _admission_keys(config.admission) != _admission_keys(Admission())
    )


@dataclass(frozen=True, slots=True)
class Applied:
    """The policy a process applies: its configuration with the policy keys it applies, the catalog, and the
    fingerprint; `record` is the store's record it follows, if any; `node` the daemon's membership."""

    config: Config
    catalog: Catalog
    fingerprint: str
    record: PolicyRecord | None = None
    node: Node | None = None


def own_policy(config: Config) -> Applied:
    """The configuration's own policy, with the built-in catalog."""
    return Applied(config, builtin(), fingerprint(encode(document(config, builtin()))))


async def take_policy(config: Config, index: Index, role: Role, *, replace: bool = False) -> Applied:
    if role == "none":
        return own_policy(config)
    if role == "serve":
        node = Node(index, _node_row(encode(document(config, builtin()))))
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
        f"this command's configuration differs from the policy of the store, as {_who(record)} recorded it: "
        f"{changes}. Run it with the daemon's configuration, or with one that declares no routes and leaves "
        "[limits] and [admission] at their defaults, to apply the store's policy"
    )


def _warn_of_blind_routes(config: Config, catalog: Catalog) -> None:
    """A configured route replaces the catalog's entry whole: one declared without "image" (perhaps only to
    set a provider or a budget) makes a model the catalog knows to see images text-only."""
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
        f"the store's policy, as {_who(record)} recorded it, cannot be applied by this attachstore ({e}): "
        "upgrade attachstore to the daemon's version"
    )


def _catalog_of(recorded: dict[str, Any], record: PolicyRecord) -> Catalog:
    try:
        return Catalog.of_document(recorded.get("catalog"))
    except (msgspec.ValidationError, CatalogError) as e:
        raise _unreadable(record, e) from None


def _adopt(config: Config, recorded: dict[str, Any], record: PolicyRecord) -> Config:
    """The configuration with the record's routes, limits and admission keys in place of its own."""
    try:
        routes = msgspec.convert(recorded["routes"], dict[str, Route])
        limits = msgspec.convert(recorded["limits"], Limits)
        admission = msgspec.convert(
            {**msgspec.to_builtins(config.admission), **recorded["admission"]}, Admission
        )
    except (KeyError, TypeError, msgspec.ValidationError) as e:
        raise _unreadable(record, e) from None
    return msgspec.structs.replace(config, routes=routes, limits=limits, admission=admission)


# -- what differs -------------------------------------------------------------------------------------------


def differences(theirs: dict[str, Any], ours: dict[str, Any], there: str) -> list[str]:
    """Each key whose value differs between two policy documents, as 'key: X there, Y here'."""
    found: list[str] = []
    t_routes, o_routes = theirs.get("routes") or {}, ours.get("routes") or {}
    for rid in sorted(set(t_routes) | set(o_routes)):
        key = f"routes.{json.dumps(rid)}"
        if rid not in o_routes:
            found.append(f"{key}: declared {there}, not here")
        elif rid not in t_routes:
            found.append(f"{key}: declared here, not {there}")
        else:
            found += _values(key, t_routes[rid], o_routes[rid], there)
    for section in ("limits", "admission"):
        found += _values(section, theirs.get(section) or {}, ours.get(section) or {}, there)
    t_cat, o_cat = theirs.get("catalog") or {}, ours.get("catalog") or {}
    if t_cat != o_cat:
        found.append(f"catalog: {_catalog_change(t_cat, o_cat, there)}")
    return found


def _values(key: str, theirs: object, ours: object, there: str) -> list[str]:
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return [
            line
            for k in sorted(set(theirs) | set(ours))
            for line in _values(f"{key}.{k}", theirs.get(k), ours.get(k), there)
        ]
    if theirs == ours:
        return []
    return [f"{key}: {_shown(theirs)} {there}, {_shown(ours)} here"]


def _shown(value: object) -> str:
    return "not set" if value is None else msgspec.json.encode(value).decode()


def _catalog_change(theirs: dict[str, Any], ours: dict[str, Any], there: str) -> str:
    def entries(doc: dict[str, Any]) -> dict[str, object]:
        return {str(e.get("id") or e.get("match")): e for e in doc.get("models") or [] if isinstance(e, dict)}

    t, o = entries(theirs), entries(ours)
    changed = sorted(k for k in set(t) | set(o) if t.get(k) != o.get(k))
    named = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    versions = f"version {theirs.get('version')} {there}, {ours.get('version')} here"
    return f"{versions} ({len(changed)} entries differ: {named})" if changed else versions


def describe(found: Sequence[str]) -> str:
    shown = "; ".join(found[:_SHOWN])
    return shown + (f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")


# -- the daemon as a node -----------------------------------------------------------------------------------


def _host() -> str:
    """This host, as precisely as a pid needs: its name, its boot and its pid namespace (on Linux)."""
    boot, space = "", 0
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    with contextlib.suppress(OSError):
        space = os.stat("/proc/self/ns/pid").st_ino
    return f"{socket.gethostname()}/{boot}/{space}"


def _node_row(own: str) -> NodeRow:
    now = time.time()
    node = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    return NodeRow(node, _host(), os.getpid(), fingerprint(own), own, now, now)


class State(Enum):
    SERVING = "serving"
    STOPPING = "stopping"  # told to stop (it may still finish requests), or its process is exiting
    GONE = "gone"


def state(node: NodeRow, now: float, here: str) -> State:
    """What a node is now. One of this host is gone as soon as its process is (or is a zombie); another
    host's, once it has not been seen for NODE_TTL. A node says it is stopping in its row (a negative
    `seen_at`: since when); one stopping for longer than a shutdown takes is gone."""
    stopping = node.seen_at < 0
    if node.host == here:
        running = liveness.process(node.pid)
        if running is Process.GONE or abs(node.seen_at) <= now - LOCAL_TTL:  # or its pid is another's now
            return State.GONE
        return State.STOPPING if stopping or running is Process.EXITING else State.SERVING
    if stopping:
        return State.STOPPING if -node.seen_at > now - STOPPING_TTL else State.GONE
    return State.SERVING if node.seen_at > now - NODE_TTL else State.GONE


class _Stopping(Exception):
    """Only nodes that are stopping enforce another policy: wait for them, then join."""

    def __init__(self, nodes: list[NodeRow]) -> None:
        self.nodes = nodes


def _who(record: PolicyRecord) -> str:
    return f"the daemon {record.recorded_by} at {rfc3339(record.recorded_at, 'seconds')}"


class Node:
    """This daemon process as a node of the store: joins at start (recording its policy or refusing), sends a
    heartbeat every HEARTBEAT_SECONDS, leaves at close; `check()` fails once the record is no longer its
    policy."""

    def __init__(self, index: Index, row: NodeRow) -> None:
        self.index = index
        self.row = row
        self._own = json.loads(row.document)
        self._task: asyncio.Task[None] | None = None
        self._warned: str | None = None  # the record last warned about
        self.waits = 0  # times it waited for a node that stops

    async def join(self, replace: bool) -> None:
        """Join the store's nodes. A node that stops (its daemon was told to, or was killed and its workers
        go on finishing their requests) with another policy is waited for, up to STOPPING_WAIT; a node whose
        process is gone is forgotten."""
        here = self.row.host

        async def decide(record: PolicyRecord | None, others: Sequence[NodeRow]) -> tuple[bool, list[str]]:
            now = time.time()
            states = {n.node: state(n, now, here) for n in others}
            differ = [n for n in others if n.fingerprint != self.row.fingerprint and not replace]
            serving = [n for n in differ if states[n.node] is State.SERVING]
            if serving:
                raise self._refusal(serving, now, "serves this store with another policy")
            stopping = [n for n in differ if states[n.node] is State.STOPPING]
            if stopping:
                raise _Stopping(stopping)
            return (record is None or record.fingerprint != self.row.fingerprint), [
                n.node for n in others if states[n.node] is State.GONE
            ]

        waited = 0.0
        while True:
            try:
                before = await self.index.join(self.row, decide)
                break
            except _Stopping as e:
                if waited >= STOPPING_WAIT:
                    raise self._refusal(
                        e.nodes, time.time(), f"is still stopping after {waited:.0f} s, with another policy"
                    ) from None
                if waited == 0:
                    log.info(
                        "waiting for node %s, which is stopping with another policy, to stop", e.nodes[0].node
                    )
                self.waits += 1
                await asyncio.sleep(STOPPING_POLL)
                waited += STOPPING_POLL
        if before is None:
            log.info("recorded the store's policy %s", self.row.fingerprint)
        elif before.fingerprint != self.row.fingerprint:
            changes = describe(differences(json.loads(before.document), self._own, "before"))
            log.warning("the store's policy changes (%s recorded the last): %s", _who(before), changes)

    def _refusal(self, nodes: list[NodeRow], now: float, what: str) -> PolicyMismatch:
        n = nodes[0]
        more = f" (and {len(nodes) - 1} more nodes)" if len(nodes) > 1 else ""
        seen = (
            f"stopping since {now + n.seen_at:.0f} s ago"
            if n.seen_at < 0
            else f"seen {now - n.seen_at:.0f} s ago"
        )
        changes = describe(differences(json.loads(n.document), self._own, "on that node"))
        return PolicyMismatch(
            f"node {n.node} ({seen}){more} {what}: {changes}. Start every node with the same configuration "
            "and attachstore version, or start this one with --replace-policy to make its policy the store's "
            "(the others then report not ready until they are restarted with it)"
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._heartbeats())

    async def stopping(self) -> None:
        """Say in the store that this node stops: a daemon starting meanwhile with another policy waits for
        it to be gone instead of refusing. It sends no more heartbeats."""
        await self._stop_heartbeats()
        with contextlib.suppress(AttachstoreError):
            await self.index.stopping(self.row.node, time.time())

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                record = await self.index.heartbeat(self.row, time.time())
            except Exception as e:  # the index is down, the disk full: the next heartbeat tries again
                log.warning("policy heartbeat failed: %s", e)
                continue
            if (why := self._stale(record)) and self._warned != (record.fingerprint if record else ""):
                self._warned = record.fingerprint if record else ""
                log.error("%s", why)

    def _stale(self, record: PolicyRecord | None) -> str | None:
        if record is not None and record.fingerprint == self.row.fingerprint:
            return None
        if record is None:
            return "the store has no policy recorded any more; restart this daemon"
        changes = describe(differences(json.loads(record.document), self._own, "in the store's policy"))
        return (
            f"this daemon's policy is no longer the store's: {_who(record)} replaced it ({changes}); it "
            "reports not ready until it is restarted with the store's configuration"
        )

    async def check(self) -> None:
        """For /readyz: StorageUnavailable once another node has replaced the store's policy."""
        if why := self._stale(await self.index.policy()):
            raise StorageUnavailable(why)

    async def _stop_heartbeats(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self) -> None:
        await self._stop_heartbeats()
        with contextlib.suppress(AttachstoreError):
            await self.index.leave(self.row.node)
