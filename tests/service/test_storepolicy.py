"""One policy per store: what a daemon records, what a command applies, and when either refuses."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import types

import pytest

from attachstore.config import Config
from attachstore.errors import StorageUnavailable
from attachstore.index import NodeRow, SqliteIndex
from attachstore.service import node, policydoc, storepolicy
from attachstore.service.catalog import Catalog, Entry, builtin
from attachstore.service.node import NODE_TTL
from attachstore.service.policydoc import PolicyMismatch, differences, document
from attachstore.service.storepolicy import Applied, take_policy
from tests.service.conftest import config
from tests.support.waiting import eventually

VISION = {"gpt-4o": {"input_modalities": ["text", "image"]}, "local-llm": {"input_modalities": ["text"]}}


async def serve(index: SqliteIndex, c: Config, *, replace: bool = False) -> Applied:
    applied = await take_policy(c, index, "serve", replace=replace)
    assert applied.node is not None
    return applied


async def test_without_a_daemon_a_command_applies_its_own_policy(index: SqliteIndex) -> None:
    applied = await take_policy(config(routes=VISION), index, "apply")
    assert applied.record is None
    assert set(applied.config.routes) == {"gpt-4o", "local-llm"}
    assert await index.policy() is None  # a command records nothing


async def test_a_command_without_a_policy_of_its_own_applies_the_daemons(index: SqliteIndex) -> None:
    daemon = config(
        routes=VISION, limits={"max_side": 4000}, admission={"oversize": "fit", "max_concurrent": 8}
    )
    served = await serve(index, daemon)
    applied = await take_policy(config(admission={"max_concurrent": 2}), index, "apply")
    assert applied.fingerprint == served.fingerprint
    assert applied.record is not None
    assert applied.config.routes == daemon.routes
    assert applied.config.limits.max_side == 4000
    assert applied.config.admission.oversize == "fit"
    assert applied.config.admission.max_concurrent == 2  # how this process runs stays its own
    assert applied.config.data_dir == "/unused"


async def test_a_command_with_the_daemons_policy_applies_it(index: SqliteIndex) -> None:
    served = await serve(index, config(routes=VISION))
    applied = await take_policy(config(routes=VISION, admission={"decode_workers": 1}), index, "apply")
    assert applied.fingerprint == served.fingerprint


async def test_a_command_with_another_policy_refuses_naming_each_key(index: SqliteIndex) -> None:
    await serve(index, config(routes=VISION, limits={"max_side": 4000}))
    mine = config(
        routes={"gpt-4o": {"input_modalities": ["text"]}, "extra": {}}, admission={"oversize": "reject"}
    )
    with pytest.raises(PolicyMismatch) as e:
        await take_policy(mine, index, "apply")
    message = str(e.value)
    for said in (
        'routes."extra": declared here, not in the store\'s policy',
        'routes."gpt-4o".input_modalities: ["text","image"] in the store\'s policy, ["text"] here',
        'routes."local-llm": declared in the store\'s policy, not here',
        "limits.max_side: 4000 in the store's policy, 2000 here",
        'admission.oversize: "fit" in the store\'s policy, "reject" here',
    ):
        assert said in message


async def test_a_command_that_applies_no_policy_opens_any_store(index: SqliteIndex) -> None:
    await serve(index, config(routes=VISION))
    applied = await take_policy(config(limits={"max_side": 10}), index, "none")
    assert applied.config.limits.max_side == 10


async def test_a_second_daemon_with_another_policy_refuses_while_the_first_lives(index: SqliteIndex) -> None:
    first = await serve(index, config(routes=VISION))
    with pytest.raises(PolicyMismatch) as e:
        await serve(index, config(routes={"gpt-4o": {"input_modalities": ["text", "image"]}}))
    assert f"node {first.node.row.node}" in str(e.value)  # type: ignore[union-attr]
    assert 'routes."local-llm": declared on that node, not here' in str(e.value)
    assert "--replace-policy" in str(e.value)
    record = await index.policy()
    assert record is not None
    assert record.fingerprint == first.fingerprint
    assert [n.node for n in await index.nodes()] == [first.node.row.node]  # type: ignore[union-attr]


async def test_the_same_policy_joins_and_a_replacement_makes_the_other_node_stale(index: SqliteIndex) -> None:
    first = await serve(index, config(routes=VISION))
    twin = await serve(index, config(routes=VISION, admission={"max_concurrent": 3}))
    assert twin.fingerprint == first.fingerprint
    assert first.node is not None
    await first.node.check()
    new = await serve(index, config(routes={}), replace=True)
    record = await index.policy()
    assert record is not None
    assert record.fingerprint == new.fingerprint
    with pytest.raises(StorageUnavailable, match="no longer the store's"):
        await first.node.check()
    assert new.node is not None
    await new.node.check()


async def test_a_restart_with_a_new_configuration_replaces_the_policy(
    index: SqliteIndex, caplog: pytest.LogCaptureFixture
) -> None:
    old = await serve(index, config(routes=VISION))
    assert old.node is not None
    await old.node.close()  # a clean stop: the node leaves
    assert await index.nodes() == []
    with caplog.at_level(logging.WARNING, "attachstore.policy"):
        await serve(index, config(routes={}))
    assert "the store's policy changes" in caplog.text
    assert 'routes."local-llm": declared before' in caplog.text


async def test_a_killed_daemon_of_this_host_is_gone_at_once(index: SqliteIndex) -> None:
    await serve(index, config(routes=VISION))
    dead = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await dead.wait()
    async with index.write() as db:  # as if the daemon had been killed: its row stays, its process is gone
        await db.execute("UPDATE nodes SET pid = ?", (dead.pid,))
    await serve(index, config(routes={}))
    assert len(await index.nodes()) == 1  # the dead node is forgotten


async def test_a_node_of_another_host_is_gone_when_not_seen_for_the_ttl(
    index: SqliteIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = policydoc.encode(document(config(routes=VISION), builtin()))
    now = time.time()
    # The daemon's clock stands at `now`: 5 s short of the TTL stays 5 s short, however long the test takes.
    monkeypatch.setattr(node, "time", types.SimpleNamespace(time=lambda: now))

    def remote(name: str, seen: float) -> NodeRow:
        return NodeRow(name, "elsewhere/x/1", 1, policydoc.fingerprint(own), own, now - 100, seen)

    async def nothing(*_: object) -> tuple[bool, list[str]]:
        return True, []

    await index.join(remote("live", now - NODE_TTL + 5), nothing)
    with pytest.raises(PolicyMismatch, match="node live"):
        await serve(index, config(routes={}))
    async with index.write() as db:
        await db.execute("UPDATE nodes SET seen_at = ?", (now - NODE_TTL - 1,))
    await serve(index, config(routes={}))
    assert "live" not in [n.node for n in await index.nodes()]


async def test_a_heartbeat_brings_back_a_forgotten_node(index: SqliteIndex) -> None:
    applied = await serve(index, config(routes=VISION))
    assert applied.node is not None
    await index.leave(applied.node.row.node)
    record = await index.heartbeat(applied.node.row, time.time())
    assert record is not None
    assert record.fingerprint == applied.fingerprint
    assert [n.node for n in await index.nodes()] == [applied.node.row.node]


def _old_catalog() -> Catalog:
    return Catalog("2025-01-01", [Entry(match="gpt-4o*", input_modalities=["text"], source="https://old")])


async def test_a_command_applies_the_daemons_catalog_not_its_own(
    index: SqliteIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storepolicy, "builtin", _old_catalog)
    await serve(index, config(routes={"local-llm": {}}))  # a daemon of an older attachstore
    monkeypatch.undo()
    for mine in (config(), config(routes={"local-llm": {}})):  # no policy of its own, or the daemon's
        applied = await take_policy(mine, index, "apply")
        assert applied.catalog.version == "2025-01-01"
        found = applied.catalog.lookup("gpt-4o")
        assert found is not None
        assert found.entry.input_modalities == ["text"]


async def test_a_daemon_with_another_catalog_says_so(
    index: SqliteIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storepolicy, "builtin", _old_catalog)
    await serve(index, config())
    monkeypatch.undo()
    with pytest.raises(PolicyMismatch) as e:
        await serve(index, config())
    assert f"catalog: version 2025-01-01 on that node, {builtin().version} here" in str(e.value)


async def test_a_policy_recorded_by_a_newer_attachstore_is_not_guessed_at(index: SqliteIndex) -> None:
    applied = await serve(index, config(routes=VISION))
    newer = json.loads(applied.node.row.document)  # type: ignore[union-attr]
    newer["limits"]["max_depth"] = 3
    async with index.write() as db:
        await db.execute("UPDATE policy SET document = ?", (json.dumps(newer),))
    with pytest.raises(PolicyMismatch, match=r"cannot be applied by this attachstore .*upgrade"):
        await take_policy(config(), index, "apply")


def test_differences_name_every_key() -> None:
    a = document(config(routes={"x": {"provider": "gemini"}}), builtin())
    b = document(config(routes={"x": {}, "y": {}}, limits={"max_frames": 2}), builtin())
    assert differences(a, b, "there") == [
        'routes."x".provider: "gemini" there, not set here',
        'routes."y": declared here, not there',
        "limits.max_frames: 64 there, 2 here",
    ]
    assert differences(a, a, "there") == []


def test_only_policy_keys_are_policy() -> None:
    assert not policydoc.declares_policy(config(admission={"decode_workers": 2, "max_concurrent": 3}))
    assert policydoc.declares_policy(config(admission={"strip_metadata": True}))
    assert policydoc.declares_policy(config(routes={"m": {}}))
    assert policydoc.declares_policy(config(limits={"max_side": 10}))


async def test_a_node_whose_policy_was_replaced_says_so_at_its_next_beat(
    index: SqliteIndex, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(node, "HEARTBEAT_SECONDS", 0.01)
    first = await serve(index, config(routes=VISION))
    assert first.node is not None
    with caplog.at_level(logging.ERROR, "attachstore.policy"):
        first.node.start()
        await serve(index, config(), replace=True)
        await eventually(
            lambda: "no longer the store's" in caplog.text, "a beat to say the policy was replaced"
        )
        await first.node.close()
    assert caplog.text.count("this daemon's policy is no longer the store's") == 1  # said once, not each beat
    assert 'routes."gpt-4o": declared here, not in the store\'s policy' in caplog.text
    assert first.node.row.node not in [n.node for n in await index.nodes()]  # it left


async def test_a_daemon_warns_of_a_route_that_hides_what_the_catalog_says(
    index: SqliteIndex, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "attachstore.policy"):
        await serve(index, config(routes={"gpt-4o": {"provider": "openai-chat"}, "deepseek-chat": {}}))
    assert (
        'routes."gpt-4o" is text-only, but the built-in catalog says the model takes images (entry gpt-4o*)'
        in (caplog.text)
    )
    assert "deepseek-chat" not in caplog.text  # the catalog says text-only too
