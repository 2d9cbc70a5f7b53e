"""This daemon process as a node of the store: it joins as it starts (recording its policy, or refusing while
a live node enforces another), sends a heartbeat, and leaves at close
(docs/configuration.md#one-policy-per-store)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

from ..errors import AttachstoreError, StorageUnavailable
from ..index import Index, NodeRow, PolicyRecord
from . import liveness
from .liveness import Process
from .policydoc import PolicyMismatch, describe, differences, fingerprint, who

log = logging.getLogger("attachstore.policy")

HEARTBEAT_SECONDS = 5.0
NODE_TTL = 30.0  # a node of another host not seen for this long is gone
LOCAL_TTL = 600.0  # one of this host is gone when its process is, or (a reused pid) not seen for this long
STOPPING_TTL = 60.0  # a node of another host that began to stop this long ago is gone (a shutdown is 30 s)
STOPPING_WAIT = 40.0  # a starting daemon waits this long for nodes that stop (longer than a shutdown)
STOPPING_POLL = 0.1


def _host() -> str:
    boot, space = "", 0
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    with contextlib.suppress(OSError):
        space = os.stat("/proc/self/ns/pid").st_ino
    return f"{socket.gethostname()}/{boot}/{space}"


def node_row(own: str) -> NodeRow:
    now = time.time()
    node = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    return NodeRow(node, _host(), os.getpid(), fingerprint(own), own, now, now)


class State(Enum):
    SERVING = "serving"
    STOPPING = "stopping"  # told to stop (it may still finish requests), or its process is exiting
    GONE = "gone"


def state(node: NodeRow, now: float, here: str) -> State:
    """A node of this host is gone with its process; another host's once unseen for NODE_TTL. A negative
    `seen_at` says since when it is stopping; stopping longer than a shutdown takes is gone."""
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
    def __init__(self, nodes: list[NodeRow]) -> None:
        self.nodes = nodes


class Node:
    def __init__(self, index: Index, row: NodeRow) -> None:
        self.index = index
        self.row = row
        self._own = json.loads(row.document)
        self._task: asyncio.Task[None] | None = None
        self._warned: str | None = None  # the record last warned about
        self.waits = 0  # times it waited for a node that stops

    async def join(self, replace: bool) -> None:
        """A node stopping with another policy is waited for, up to STOPPING_WAIT; one whose process is gone
        is forgotten."""
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
            log.warning("the store's policy changes (%s recorded the last): %s", who(before), changes)

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
        """Said in the store so that a daemon starting meanwhile with another policy waits instead of
        refusing."""
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
            f"this daemon's policy is no longer the store's: {who(record)} replaced it ({changes}); it "
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
