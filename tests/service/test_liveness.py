"""Whether a node of the store is alive: a process of this host that is gone, a zombie or exiting serves
nothing; a node that stops is waited for, and never named as serving (issue 31, finding 7)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from attachstore.index import NodeRow, SqliteIndex
from attachstore.service import liveness, policydoc
from attachstore.service import node as nodes
from attachstore.service.catalog import builtin
from attachstore.service.liveness import Process
from attachstore.service.policydoc import PolicyMismatch, document
from attachstore.service.storepolicy import take_policy
from tests.service.conftest import config
from tests.support.daemon import state
from tests.support.waiting import eventually, until


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this host, running until the test ends it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def planted(index: SqliteIndex, pid: int, seen_at: float, limits: dict[str, int]) -> NodeRow:
    """A node of this host with process `pid`, enforcing a policy of these limits."""
    own = policydoc.encode(document(config(limits=limits), builtin()))
    row = NodeRow(f"vm:{pid}:abcdef", nodes._host(), pid, policydoc.fingerprint(own), own, 1.0, seen_at)

    async def keep(*_: object) -> tuple[bool, list[str]]:
        return True, []

    await index.join(row, keep)
    return row


def fake_proc(root: Path, pid: int, state: str, flags: int = 0, pending: int = 0) -> Path:
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / str(pid)).mkdir()
    rest = " ".join(["0"] * 40)
    (root / str(pid) / "stat").write_text(f"{pid} (python3 -m a) b) {state} 1 1 1 0 -1 {flags} {rest}\n")
    (root / str(pid) / "status").write_text(f"Name:\tpython3\nSigPnd:\t{pending:016x}\nShdPnd:\t{0:016x}\n")
    return root


def test_what_proc_says_of_a_process(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    assert liveness.process(11, fake_proc(proc, 11, "S")) is Process.RUNNING
    assert liveness.process(12, fake_proc(proc, 12, "Z")) is Process.GONE
    assert liveness.process(13, fake_proc(proc, 13, "R", flags=0x4)) is Process.EXITING  # PF_EXITING
    assert liveness.process(14, fake_proc(proc, 14, "D", pending=1 << 8)) is Process.EXITING  # SIGKILL
    assert liveness.process(15, proc) is Process.GONE


@pytest.fixture
def zombie() -> Iterator[int]:
    """A process of this host that has exited and that its parent (the test) has not reaped yet."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        until(lambda: state(dead.pid) == "Z", "the process to be a zombie")
        yield dead.pid
    finally:
        dead.wait()


async def test_a_zombie_of_this_host_serves_nothing(index: SqliteIndex, zombie: int) -> None:
    await planted(index, zombie, time.time(), {"max_side": 3000})
    applied = await take_policy(config(), index, "serve")
    assert applied.node is not None
    assert [n.node for n in await index.nodes()] == [applied.node.row.node]  # the zombie's is forgotten
    await applied.node.close()


async def test_a_node_that_stops_is_waited_for(index: SqliteIndex, sleeper: subprocess.Popen[bytes]) -> None:
    stopping = await planted(index, sleeper.pid, -time.time(), {"max_side": 3000})
    node = nodes.Node(index, nodes.node_row(policydoc.encode(document(config(), builtin()))))
    joining = asyncio.create_task(node.join(replace=False))
    await eventually(lambda: node.waits >= 3 or joining.done(), "the join to wait")
    assert not joining.done(), joining.exception()
    sleeper.kill()  # it stops, and its parent reaps it
    sleeper.wait()
    await asyncio.wait_for(joining, 60)
    assert stopping.node not in [n.node for n in await index.nodes()]
    await node.close()


async def test_a_node_still_stopping_after_the_wait_is_named_as_stopping(
    index: SqliteIndex, sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodes, "STOPPING_WAIT", 3 * nodes.STOPPING_POLL)
    await planted(index, sleeper.pid, -time.time(), {"max_side": 3000})
    with pytest.raises(PolicyMismatch) as refused:
        await take_policy(config(), index, "serve")
    assert "is still stopping" in str(refused.value)
    assert "serves" not in str(refused.value)


async def test_a_running_node_of_another_policy_is_refused_at_once(
    index: SqliteIndex, sleeper: subprocess.Popen[bytes]
) -> None:
    await planted(index, sleeper.pid, time.time(), {"max_side": 3000})
    with pytest.raises(PolicyMismatch, match="serves this store with another policy"):
        await take_policy(config(), index, "serve")


async def test_a_daemon_that_stops_says_so_in_the_store(index: SqliteIndex) -> None:
    applied = await take_policy(config(), index, "serve")
    assert applied.node is not None
    applied.node.start()
    await applied.node.stopping()
    [row] = await index.nodes()
    assert row.seen_at < 0
    await applied.node.close()
    assert await index.nodes() == []
