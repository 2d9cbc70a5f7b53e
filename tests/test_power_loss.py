"""Power loss at any instant (SPEC section 1), not only SIGKILL: each scenario runs the real write path on a
recording `FileOps` (tests/support/powercut.py), then every state a power cut at each point of it may leave
is laid out on disk, the store opened on it as a restart would, and the invariants checked:

- every ref answered before the cut (and every object the scenario started with and did not set out to
  remove) reads back verified;
- the audit finds no row without whole bytes, no damaged file, nothing but unindexed objects whose bytes
  verify (what an admission answered after the cut leaves), except for the objects the scenario damaged or
  collected on purpose;
- gc then removes every staging file and unindexed object, and a repairing audit afterwards still leaves
  every answered ref readable.

The mutation runs at the end break the write path (one fsync removed, one step moved) and check that the
same exploration then fails, naming the lost ref. Set POWERCUT_SEED to replay a sample."""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from attachstore.config import Config
from attachstore.errors import AttachstoreError
from attachstore.maintenance import Audit, Kind, gc, migrate
from attachstore.refs import Ref
from attachstore.service import Store, Upload, VariantSpec
from attachstore.storage import local
from attachstore.storage.s3 import S3BlobStore
from tests.conftest import MakeConfig
from tests.support.faults import flip_byte
from tests.support.http import object_path
from tests.support.images import png
from tests.support.powercut import (
    Explored,
    Journal,
    JournalOps,
    Lost,
    RecordingBucket,
    State,
    StoredS3,
    commits_recorded,
    explore,
)

# The bucket an S3 store opened now talks to (the `bucket` fixture puts it behind S3BlobStore.start).
SERVING: list[RecordingBucket] = []
SEED = int(os.environ.get("POWERCUT_SEED", random.randrange(1 << 32)))
DAY = 86400.0
Action = Callable[[Store, "Scenario"], Awaitable[None]]


@dataclass
class Scenario:
    """What a run must keep: `kept` (objects of the setup that must survive every cut), the bytes of every
    ref it may answer, and `may_lose` (objects it damaged or collected on purpose)."""

    journal: Journal
    config: Config
    expected: dict[str, bytes] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)
    may_lose: set[str] = field(default_factory=set)
    then: Callable[[Config], Awaitable[None]] | None = None  # a last check, on the state's configuration

    async def admit(self, store: Store, *images: bytes, session: str | None = None) -> list[str]:
        result = await store.admit([Upload.of_bytes(i) for i in images], "user", session=session)
        refs = [a.ref for a in result.attachments]
        self.expected.update(zip(refs, images, strict=True))
        return refs

    def answer(self, *refs: str) -> None:
        self.journal.answer(*refs)


async def read_back(store: Store, ref: str, expected: bytes) -> None:
    row = await store.index.get(ref)
    if row is None:
        raise Lost(f"{ref} was answered and has no row")
    try:
        _, data = await store.verified(Ref.parse(ref), row, None)
    except AttachstoreError as e:
        raise Lost(f"{ref} was answered and does not read back: {e.code}: {e.message}") from None
    if data != expected:
        raise Lost(f"{ref} was answered and reads back other bytes")


def checker(scenario: Scenario) -> Callable[[Path, State], Awaitable[None]]:
    async def check(data_dir: Path, state: State) -> None:
        must = scenario.kept | set(state.answered)
        config = msgspec.structs.replace(scenario.config, data_dir=str(data_dir))
        # On S3, the bucket as the cut left it, every object two days old (as the files are: materialize).
        SERVING[:] = [RecordingBucket(None, state.bucket, age=2 * DAY)]
        store = await Store.open(config)
        try:
            for ref in sorted(must):
                await read_back(store, ref, scenario.expected[ref])
            for finding in (await Audit(store, settle=0).run()).findings:
                if finding.ref in scenario.may_lose - must:
                    continue
                if finding.kind == Kind.STRAY_FILE and finding.detail.endswith("its bytes verify"):
                    continue  # an object whose admission did not commit: gc's to remove
                raise Lost(f"the audit found {finding.kind} {finding.ref or finding.path}: {finding.detail}")
            await gc.execute(store, await gc.plan(store, grace=DAY))
            if store.local is not None and (left := list(store.local.walk_staging())):
                raise Lost(f"gc left the staging file {left[0].path}")
            for finding in (await Audit(store, settle=0, repair=True).run()).findings:
                if finding.ref not in scenario.may_lose - must:
                    raise Lost(f"after gc the audit found {finding.kind} {finding.ref}: {finding.detail}")
            for ref in sorted(must):
                await read_back(store, ref, scenario.expected[ref])
        finally:
            await store.close()
        if scenario.then is not None:
            await scenario.then(config)

    return check


async def run(
    tmp_path: Path,
    config: Config,
    action: Action,
    setup: Action | None = None,
    *,
    ops: type[JournalOps] = JournalOps,
    budget: int = 60,
    per_cut: int = 64,
    late_puts: bool = False,
) -> Explored:
    """Set the store up (durable, not recorded), record `action`, then explore every cut of the record."""
    journal = Journal(Path(config.data_dir))
    scenario = Scenario(journal, config)
    journal.bucket = RecordingBucket(journal)
    journal.bucket.late = late_puts
    SERVING[:] = [journal.bucket]
    store = await Store.open(config, ops(journal))
    try:
        if setup is not None:
            await setup(store, scenario)
        journal.start()
        with commits_recorded(journal):
            await action(store, scenario)
        journal.recording = False
    finally:
        await store.close()
    explored = await explore(
        journal, checker(scenario), tmp_path / "state", seed=SEED, per_cut=per_cut, budget=budget
    )
    print(f"\n{action.__name__}: {explored}")  # the counts per scenario (pytest -s)
    return explored


# -- the scenarios --------------------------------------------------------------------------------------


async def admit_new(store: Store, s: Scenario) -> None:
    s.answer(*await s.admit(store, png(20, 10, seed=1)))


async def with_one(store: Store, s: Scenario) -> None:
    s.kept.update(await s.admit(store, png(20, 10, seed=1)))


async def admit_again(store: Store, s: Scenario) -> None:
    s.answer(*await s.admit(store, png(20, 10, seed=1)))


async def with_one_damaged(store: Store, s: Scenario) -> None:
    (ref,) = await s.admit(store, png(20, 10, seed=1))
    if isinstance(store.blobs, S3BlobStore):  # the bucket's copy rots
        bucket, key = SERVING[0], store.blobs.key(Ref.parse(ref))
        damaged = bytearray(bucket.objects[key].data)
        damaged[len(damaged) // 2] ^= 0xFF
        bucket.objects[key] = StoredS3(bytes(damaged), hashlib.md5(damaged).hexdigest(), datetime.now(UTC))
    else:
        flip_byte(object_path(Path(s.config.data_dir), ref))
    s.may_lose.add(ref)


async def admit_batch(store: Store, s: Scenario) -> None:
    # One object the setup left, one new, one new twice in the batch.
    s.answer(*await s.admit(store, png(20, 10, seed=2), png(20, 10, seed=1), png(20, 10, seed=2)))


async def admit_two_in_turn(store: Store, s: Scenario) -> None:
    s.answer(*await s.admit(store, png(20, 10, seed=1)))
    s.answer(*await s.admit(store, png(20, 10, seed=2)))


async def with_garbage(store: Store, s: Scenario) -> None:
    await store.sessions.create(("", "s-1"), None)
    s.may_lose.update(await s.admit(store, png(20, 10, seed=1), png(20, 10, seed=2)))
    s.kept.update(await s.admit(store, png(20, 10, seed=3), session="s-1"))


async def sweep(store: Store, s: Scenario) -> None:
    # Two hours on, with a grace of one: the two unheld objects are garbage, the held one is not.
    result = await gc.execute(store, await gc.plan(store, grace=3600, now=time.time() + 7200))
    if sorted(result.collected) != sorted(s.may_lose):  # pragma: no cover - the scenario itself is wrong
        raise AssertionError(result)


async def with_two_one_damaged(store: Store, s: Scenario) -> None:
    s.kept.update(await s.admit(store, png(20, 10, seed=2)))
    await with_one_damaged(store, s)


async def read_damaged(store: Store, s: Scenario) -> None:
    (ref,) = s.may_lose
    with pytest.raises(AttachstoreError, match="do not match"):
        await store.read(ref)


async def with_a_large_one(store: Store, s: Scenario) -> None:
    s.kept.update(await s.admit(store, png(600, 400, seed=4)))


async def derive(store: Store, s: Scenario) -> None:
    (source,) = s.kept
    row = await store.index.get(source)
    assert row is not None
    variant = await store.variant(row, VariantSpec(max_side=64, max_pixels=64 * 64, max_bytes=1 << 20))
    s.expected[variant.ref] = await store.blobs.read(Ref.parse(variant.ref), variant.bytes)
    s.answer(variant.ref)


async def reindex_a_stray(store: Store, s: Scenario) -> None:
    # What an admission SIGKILLed between its link and its directory fsyncs leaves: an object file whose name
    # sits in the page cache, not yet durable. The audit's repair then publishes a row for it.
    data = png(20, 10, seed=5)
    ref = Ref.of("sha256", data)
    blobs = store.local
    assert blobs is not None
    final = blobs.path(ref)
    blobs._make_parents(final.parent)
    blobs.ops.link(blobs._stage(data), final)
    report = await Audit(store, repair=True, settle=0).run()
    assert [f.repair for f in report.findings] == ["re-indexed"]
    s.expected[str(ref)] = data
    s.answer(str(ref))


# -- the tests ------------------------------------------------------------------------------------------


SCENARIOS: dict[str, tuple[Action, Action | None]] = {  # (what is recorded, what comes before it)
    "admitting a new object": (admit_new, None),
    "admitting an existing object": (admit_again, with_one),
    "healing a damaged object": (admit_again, with_one_damaged),
    "admitting a batch": (admit_batch, with_one),
    "admitting one after another": (admit_two_in_turn, None),
    "a gc sweep": (sweep, with_garbage),
    "quarantining on read": (read_damaged, with_two_one_damaged),
    "deriving a variant": (derive, with_a_large_one),
    "the audit re-indexing a stray": (reindex_a_stray, None),
}


@pytest.mark.parametrize(("action", "setup"), SCENARIOS.values(), ids=list(SCENARIOS))
async def test_every_power_cut_keeps_every_promise(
    tmp_path: Path, make_config: MakeConfig, action: Action, setup: Action | None
) -> None:
    await run(tmp_path, make_config(), action, setup)


async def test_migrate_copy(tmp_path: Path, make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    source_config = make_config(data_dir=str(tmp_path / "source"))
    source = await Store.open(source_config)
    images = [png(20, 10, seed=i) for i in range(3)]
    try:
        await source.admit([Upload.of_bytes(i) for i in images], "user")
    finally:
        await source.close()
    target_config = make_config()

    refs = [str(Ref.of("sha256", i)) for i in images]

    async def copy(store: Store, s: Scenario) -> None:
        # The target's store is migrate's own: it gets the recording FileOps through the default.
        with monkeypatch.context() as patch:
            patch.setattr(local, "FileOps", lambda: JournalOps(s.journal))
            assert (await migrate.run(source_config, target_config)).clean
        s.expected.update(zip(refs, images, strict=True))
        s.answer(*refs)

        async def run_again(config: Config) -> None:
            # Wherever the copy was cut, running it again finishes it.
            report = await migrate.run(source_config, config)
            if not report.clean or report.verified != len(refs):
                raise Lost(f"migrate run again: {report}")

        s.then = run_again

    await run(tmp_path, target_config, copy, budget=100)


LOST_REF = str(Ref.of("sha256", png(20, 10, seed=1)))  # what admit_new answers


# -- S3: the bucket's durability at a PUT's answer, and the order of PUTs, DELETEs and commits ------------


@pytest.fixture
def s3_config(make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> Config:
    async def start(self: S3BlobStore) -> None:
        self._client = SERVING[0]

    monkeypatch.setattr(S3BlobStore, "start", start)
    return make_config(storage={"backend": "s3", "endpoint": "http://127.0.0.1:9", "bucket": "recorded"})


S3_SCENARIOS = {
    name: SCENARIOS[name]
    for name in (
        "admitting a new object",
        "healing a damaged object",
        "admitting a batch",
        "a gc sweep",
        "quarantining on read",
    )
}


@pytest.mark.parametrize(("action", "setup"), S3_SCENARIOS.values(), ids=list(S3_SCENARIOS))
async def test_on_s3_every_power_cut_keeps_every_promise(
    tmp_path: Path, s3_config: Config, action: Action, setup: Action | None
) -> None:
    await run(tmp_path, s3_config, action, setup)


async def test_s3_a_put_answered_before_it_is_durable_loses_the_ref_and_is_caught(
    tmp_path: Path, s3_config: Config
) -> None:
    with pytest.raises(Lost, match=f"{LOST_REF} was answered and does not read back"):
        await run(tmp_path, s3_config, admit_new, late_puts=True)


# -- the mutation runs: a broken write path must fail, naming the lost ref ------------------------------


def _is_bucket(ops: JournalOps, path: Path, depth: int) -> bool:
    rel = ops.journal.rel(path)
    return rel is not None and rel.startswith("objects/") and rel.count("/") == depth


class NoFileFsync(JournalOps):
    def fsync(self, fd: int) -> None:
        pass


class NoBucketFsync(JournalOps):
    def fsync_dir(self, path: Path) -> None:
        if not _is_bucket(self, path, 3):  # objects/<alg>/<xx>/<yy>
            super().fsync_dir(path)


class NoCreatedParentFsync(JournalOps):
    def fsync_dir(self, path: Path) -> None:
        if not _is_bucket(self, path, 2):  # objects/<alg>/<xx>, which holds the new <yy>
            super().fsync_dir(path)


class DirSyncAfterAnswer(JournalOps):
    """The ordering step: the directory fsyncs held back until the admission has answered."""

    def fsync_dir(self, path: Path) -> None:
        if self.journal.recording and _is_bucket(self, path, 3):
            self.journal.deferred.append(lambda: JournalOps.fsync_dir(self, path))
        else:
            super().fsync_dir(path)


@pytest.mark.parametrize("ops", [NoFileFsync, NoBucketFsync, NoCreatedParentFsync, DirSyncAfterAnswer])
async def test_a_broken_write_path_loses_the_ref_and_is_caught(
    tmp_path: Path, make_config: MakeConfig, ops: type[JournalOps]
) -> None:
    with pytest.raises(Lost, match=f"{LOST_REF} was answered and does not read back") as lost:
        await run(tmp_path, make_config(), admit_new, ops=ops)
    print(f"\n{ops.__name__}: {lost.value}")
