"""Power-loss states: a journal of the write path's file operations (`FileOps`) and of the index's commits,
and every on-disk state a power cut at each point of it may leave under the model of docs/design.md
("Power loss"):

- a file's bytes not made durable by an fsync of that file may be lost, cut short, or there at their full
  length with their last part unwritten (zeros);
- a directory entry (a create, mkdir, link, rename, unlink, rmdir) not made durable by an fsync of its
  directory may be absent (or, removed, still there); a rename is never split so as to lose the file: its
  new name may appear without its old one going, or neither;
- between fsyncs, the operations on different files and directories reach the disk in any order: each one
  not forced by a later fsync is there or not independently of the others;
- the index (SQLite, WAL, synchronous = FULL) is the database as of its last commit before the cut: a commit
  is recorded once it has returned, so a cut before that point sees the transaction before it.

`Journal.states(cut)` builds the states of one cut; `explore` builds them for every cut, keeps the distinct
ones and hands each to a check, exhaustively up to a budget and by seeded sampling past it (the worst state
of each cut, every choice at its most lost, is always among those checked). A check raises `Lost`, whose
message names the ref; `explore` adds the state and the seed that reproduces the sample.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import random
import shutil
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError  # type: ignore[import-untyped]

from attachstore.index import SqliteIndex
from attachstore.storage import FileOps

INDEX_FILE = "index.sqlite3"
DIR = "dir"  # an Entry's target when it is a directory


class Lost(AssertionError):
    """An invariant failed in a crash state; the message names what was lost and where."""


# -- the journal's events -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Data:
    inode: int
    data: bytes

    def __str__(self) -> str:
        return f"write of {len(self.data)} bytes to file #{self.inode}"


@dataclass(frozen=True, slots=True)
class Sync:
    inode: int

    def __str__(self) -> str:
        return f"fsync of file #{self.inode}"


@dataclass(frozen=True, slots=True)
class Entry:
    """A directory entry made (`target` an inode, or DIR) or removed (None). `pair`: the two halves of a
    rename share it; `part` says which ("from", "to")."""

    path: str  # relative to the journal's root, "/"-separated
    target: int | str | None
    pair: int | None = None
    part: str = ""

    @property
    def parent(self) -> str:
        return self.path.rpartition("/")[0]

    def __str__(self) -> str:
        if self.pair is not None:
            return f"rename {self.part} {self.path}"
        what = (
            "removal" if self.target is None else "mkdir" if self.target == DIR else f"entry #{self.target}"
        )
        return f"{what} of {self.path}"


@dataclass(frozen=True, slots=True)
class DirSync:
    path: str

    def __str__(self) -> str:
        return f"fsync of directory {self.path or '.'}/"


@dataclass(frozen=True, slots=True)
class Commit:
    db: bytes

    def __str__(self) -> str:
        return "index commit"


@dataclass(frozen=True, slots=True)
class Answer:
    refs: tuple[str, ...]

    def __str__(self) -> str:
        return f"answer {', '.join(self.refs)}"


@dataclass(frozen=True, slots=True)
class Put:
    """An S3 PUT (or DELETE: `data` None) the bucket acknowledged: durable from then on (S3's promise)."""

    key: str
    data: bytes | None

    def __str__(self) -> str:
        return f"{'PUT' if self.data is not None else 'DELETE'} {self.key}"


Event = Data | Sync | Entry | DirSync | Commit | Answer | Put


def snapshot(path: Path) -> bytes:
    """The committed database at `path`, as one file's bytes."""
    src, dst = sqlite3.connect(path), sqlite3.connect(":memory:")
    try:
        src.backup(dst)
        return dst.serialize()
    finally:
        src.close()
        dst.close()


class Journal:
    """What the write path did under `root`, in order. Off until `start()`, which takes what is on disk then
    (files, directories, the index) as durable: the state the scenario starts from."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.events: list[Event] = []
        self.recording = False
        self.lock = threading.RLock()
        self.base_dirs: set[str] = set()
        self.base_files: dict[str, int] = {}
        self.contents: dict[int, bytes] = {}  # what the baseline's files hold
        self.base_db = b""
        self.bucket: RecordingBucket | None = None  # the S3 backend's, when it is the one recorded
        self.base_bucket: dict[str, bytes] = {}
        self.names: dict[str, int] = {}  # the live name -> inode, as the operations go
        self._inodes = itertools.count()
        self._pairs = itertools.count()
        # (mutation runs) operations held back until the next answer: an ordering step moved
        self.deferred: list[Callable[[], None]] = []

    def rel(self, path: str | Path) -> str | None:
        p = os.path.relpath(path, self.root)
        if p == ".":
            return ""
        return None if p.startswith("..") else p.replace(os.sep, "/")

    def start(self) -> None:
        with self.lock:
            self.base_dirs, self.base_files, self.names = {""}, {}, {}
            for here, dirs, files in os.walk(self.root):
                top = self.rel(here) or ""
                for d in dirs:
                    self.base_dirs.add(f"{top}/{d}".lstrip("/"))
                for f in files:
                    path = f"{top}/{f}".lstrip("/")
                    if path.startswith(INDEX_FILE):
                        continue
                    inode = next(self._inodes)
                    self.base_files[path] = inode
                    self.contents[inode] = Path(here, f).read_bytes()
            self.names = dict(self.base_files)
            self.base_db = snapshot(self.root / INDEX_FILE)
            if self.bucket is not None:
                self.base_bucket = {k: o.data for k, o in self.bucket.objects.items()}
            self.events = []
            self.recording = True

    def record(self, *events: Event) -> None:
        if self.recording:
            self.events.extend(events)

    def new_inode(self) -> int:
        return next(self._inodes)

    def new_pair(self) -> int:
        return next(self._pairs)

    def commit(self, db: Path) -> None:
        with self.lock:
            if self.recording and self.rel(db) == INDEX_FILE:
                self.events.append(Commit(snapshot(db)))

    def answer(self, *refs: str) -> None:
        with self.lock:
            self.record(Answer(tuple(refs)))
            deferred, self.deferred = self.deferred, []
        for step in deferred:
            step()

    # -- the states a cut may leave ---------------------------------------------------------------------

    def states(self, cut: int, rng: random.Random, budget: int) -> Iterator[State]:
        """The states of a power cut after the first `cut` events: the worst first (every free choice at its
        most lost), then every combination of the free choices, or `budget` of them drawn by `rng`."""
        events = self.events[:cut]
        db, answered = self.base_db, []
        for e in events:
            if isinstance(e, Commit):
                db = e.db
            elif isinstance(e, Answer):
                answered += e.refs
        knobs = self._knobs(events)
        sizes = [len(k.options) for k in knobs]
        total = 1
        for n in sizes:
            total *= n
        if total <= budget:
            picks: Iterator[tuple[int, ...]] = itertools.product(*(range(n) for n in sizes))
        else:
            drawn = (tuple(rng.randrange(n) for n in sizes) for _ in range(budget))
            picks = itertools.chain([tuple(0 for _ in sizes)], drawn)
        for pick in picks:
            chosen = [k.options[i] for k, i in zip(knobs, pick, strict=True)]
            yield self._build(cut, events, db, tuple(answered), chosen)

    def _knobs(self, events: Sequence[Event]) -> list[Knob]:
        synced_dirs: dict[str, int] = {}  # directory -> index of its last fsync before the cut
        synced_files: dict[int, int] = {}
        for i, e in enumerate(events):
            if isinstance(e, DirSync):
                synced_dirs[e.path] = i
            elif isinstance(e, Sync):
                synced_files[e.inode] = i

        def forced(i: int, e: Entry) -> bool:
            return synced_dirs.get(e.parent, -1) > i

        knobs: list[Knob] = []
        pairs: dict[int, list[int]] = {}
        for i, e in enumerate(events):
            if not isinstance(e, Entry):
                continue
            if e.pair is not None:
                pairs.setdefault(e.pair, []).append(i)
            elif not forced(i, e):
                knobs.append(Knob([Option(f"{e} not durable", frozenset()), Option("", frozenset({i}))]))
        forced_entries = {
            i for i, e in enumerate(events) if isinstance(e, Entry) and e.pair is None and forced(i, e)
        }
        for halves in pairs.values():
            if len(halves) < 2:  # the cut falls between the two records of one rename: not yet renamed
                continue
            src, dst = halves
            s, d = events[src], events[dst]
            assert isinstance(s, Entry)
            assert isinstance(d, Entry)
            if forced(src, s):  # its old name is gone for good, so its new one is there
                forced_entries |= {src, dst}
            elif forced(dst, d):
                knobs.append(
                    Knob(
                        [
                            Option(f"the old name of {d.path} still there", frozenset({dst})),
                            Option("", frozenset({src, dst})),
                        ]
                    )
                )
            else:
                knobs.append(
                    Knob(
                        [
                            Option(f"rename to {d.path} not durable", frozenset()),
                            Option(f"the old name of {d.path} still there", frozenset({dst})),
                            Option("", frozenset({src, dst})),
                        ]
                    )
                )
        self._forced = forced_entries
        # File contents: what an fsync made durable, and what may be lost of the rest.
        written: dict[int, list[tuple[int, bytes]]] = {}
        for i, e in enumerate(events):
            if isinstance(e, Data):
                written.setdefault(e.inode, []).append((i, e.data))
        for inode, writes in written.items():
            durable = b"".join(d for i, d in writes if synced_files.get(inode, -1) > i)
            pending = b"".join(d for i, d in writes if synced_files.get(inode, -1) <= i)
            base = self.contents.get(inode, b"") + durable
            if not pending:
                knobs.append(Knob([Option("", frozenset(), {inode: base})]))
                continue
            half = len(pending) // 2
            torn = pending[:half] + bytes(len(pending) - half)
            knobs.append(
                Knob(
                    [
                        Option(f"the unsynced bytes of file #{inode} lost", frozenset(), {inode: base}),
                        Option(f"file #{inode} cut short", frozenset(), {inode: base + pending[:half]}),
                        Option(f"file #{inode} torn", frozenset(), {inode: base + torn}),
                        Option("", frozenset(), {inode: base + pending}),
                    ]
                )
            )
        return knobs

    def _build(
        self, cut: int, events: Sequence[Event], db: bytes, answered: tuple[str, ...], options: list[Option]
    ) -> State:
        persisted = set(self._forced)
        contents = dict(self.contents)
        lost: list[str] = []
        for o in options:
            persisted |= o.entries
            contents.update(o.contents)
            if o.what:
                lost.append(o.what)
        files = dict(self.base_files)
        dirs = set(self.base_dirs)
        for i, e in enumerate(events):
            if not isinstance(e, Entry) or i not in persisted:
                continue
            if e.target is None:
                files.pop(e.path, None)
                dirs.discard(e.path)
            elif e.target == DIR:
                dirs.add(e.path)
            else:
                assert isinstance(e.target, int)
                files[e.path] = e.target

        def reachable(path: str) -> bool:
            while path:
                path = path.rpartition("/")[0]
                if path not in dirs and path:
                    return False
            return True

        kept_dirs = frozenset(d for d in dirs if reachable(d))
        kept = {p: contents.get(i, b"") for p, i in files.items() if reachable(p)}
        bucket = dict(self.base_bucket)
        for e in events:
            if isinstance(e, Put):
                if e.data is None:
                    bucket.pop(e.key, None)
                else:
                    bucket[e.key] = e.data
        where = str(events[cut - 1]) if cut else "the start"
        return State(cut, where, kept, kept_dirs, db, answered, tuple(lost), bucket)


@dataclass(frozen=True, slots=True)
class Option:
    what: str  # what this choice loses ("" when nothing)
    entries: frozenset[int]  # the entries it makes durable
    contents: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Knob:
    options: list[Option]  # the most lost first


@dataclass(frozen=True)
class State:
    cut: int
    where: str  # the last event before the cut
    files: dict[str, bytes]
    dirs: frozenset[str]
    db: bytes
    answered: tuple[str, ...]
    lost: tuple[str, ...]
    bucket: dict[str, bytes] = field(default_factory=dict)  # the S3 backend's objects

    def key(self) -> tuple[Any, ...]:
        files = tuple(sorted((p, hashlib.sha256(c).digest()) for p, c in self.files.items()))
        objects = tuple(sorted((k, hashlib.sha256(c).digest()) for k, c in self.bucket.items()))
        db = hashlib.sha256(self.db).digest()
        return (files, tuple(sorted(self.dirs)), objects, db, frozenset(self.answered))

    def describe(self) -> str:
        lost = "; ".join(self.lost) or "nothing lost"
        return f"a power cut after event {self.cut} ({self.where}), {lost}"

    def materialize(self, root: Path) -> None:
        """Lay the state out at `root`, as the disk would show it after a restart two days later (the
        files' times are set back, so that gc and the audit take none for an admission in flight, and gc's
        default grace has passed for every staging file and unindexed object)."""
        if root.exists():
            for here, dirs, _ in os.walk(root):
                for d in dirs:
                    os.chmod(os.path.join(here, d), 0o755)
            shutil.rmtree(root)
        root.mkdir(parents=True)
        old = time.time() - 2 * 86400
        for d in sorted(self.dirs):
            if d:
                (root / d).mkdir(exist_ok=True)
        for p, data in self.files.items():
            path = root / p
            path.write_bytes(data)
            os.utime(path, (old, old))
            if p.startswith("objects/"):
                os.chmod(path, 0o444)
        (root / INDEX_FILE).write_bytes(self.db)


# -- the S3 client that records ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredS3:
    data: bytes
    etag: str
    modified: datetime


def _client_error(code: str, status: int, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aenter__(self) -> _Body:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return self.data


class RecordingBucket:
    """An S3 client on one in-memory bucket (the calls S3BlobStore makes), recording each PUT and DELETE in
    the journal as the bucket acknowledges it. `late`: (a mutation run) each PUT's record held back until
    the next answer, as if the bucket acknowledged a PUT before the bytes were durable."""

    def __init__(self, journal: Journal | None, objects: dict[str, bytes] | None = None, age: float = 0.0):
        self.journal = journal
        self.late = False
        when = datetime.fromtimestamp(time.time() - age, UTC)
        self.objects = {k: StoredS3(d, hashlib.md5(d).hexdigest(), when) for k, d in (objects or {}).items()}

    def _record(self, event: Put) -> None:
        if self.journal is None:
            return
        with self.journal.lock:
            if self.late and event.data is not None and self.journal.recording:
                journal = self.journal
                journal.deferred.append(lambda: journal.record(event))
            else:
                self.journal.record(event)

    def _found(self, key: str, operation: str) -> StoredS3:
        if key not in self.objects:
            raise _client_error("NoSuchKey" if operation == "GetObject" else "404", 404, operation)
        return self.objects[key]

    async def head_bucket(self, Bucket: str) -> dict[str, Any]:  # botocore names the arguments
        return {}

    async def head_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        o = self._found(Key, "HeadObject")
        return {"ContentLength": len(o.data), "ETag": f'"{o.etag}"', "LastModified": o.modified}

    async def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        o = self._found(Key, "GetObject")
        etag = f'"{o.etag}"'
        return {"Body": _Body(o.data), "ContentLength": len(o.data), "ETag": etag, "LastModified": o.modified}

    async def put_object(self, Bucket: str, Key: str, Body: bytes, **options: str) -> dict[str, Any]:
        if options.get("IfNoneMatch") == "*" and Key in self.objects:
            raise _client_error("PreconditionFailed", 412, "PutObject")
        etag = hashlib.md5(Body).hexdigest()
        self.objects[Key] = StoredS3(bytes(Body), etag, datetime.now(UTC))
        self._record(Put(Key, bytes(Body)))
        return {"ETag": f'"{etag}"'}

    async def delete_object(self, Bucket: str, Key: str, IfMatch: str | None = None) -> dict[str, Any]:
        if IfMatch is not None and Key in self.objects and f'"{self.objects[Key].etag}"' != IfMatch:
            raise _client_error("PreconditionFailed", 412, "DeleteObject")
        self.objects.pop(Key, None)
        self._record(Put(Key, None))
        return {}

    def get_paginator(self, name: str) -> RecordingBucket:
        return self

    async def paginate(self, Bucket: str, Prefix: str) -> AsyncIterator[dict[str, Any]]:
        found = [
            {"Key": k, "Size": len(o.data), "LastModified": o.modified}
            for k, o in sorted(self.objects.items())
            if k.startswith(Prefix)
        ]
        yield {"Contents": found}


# -- the FileOps that record --------------------------------------------------------------------------


class JournalOps(FileOps):
    """Does each call and records it in the journal, in the order the calls happened (one at a time)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.fds: dict[int, int] = {}

    def _rel(self, path: Path) -> str | None:
        return self.journal.rel(path)

    def open_exclusive(self, path: Path) -> int:
        with self.journal.lock:
            fd = super().open_exclusive(path)
            inode = self.journal.new_inode()
            self.fds[fd] = inode
            rel = self._rel(path)
            if rel is not None:
                self.journal.names[rel] = inode
                self.journal.record(Entry(rel, inode))
            return fd

    def write(self, fd: int, data: memoryview) -> int:
        with self.journal.lock:
            n = super().write(fd, data)
            self.journal.record(Data(self.fds[fd], bytes(data[:n])))
            return n

    def fsync(self, fd: int) -> None:
        with self.journal.lock:
            super().fsync(fd)
            self.journal.record(Sync(self.fds[fd]))

    def close(self, fd: int) -> None:
        with self.journal.lock:
            super().close(fd)
            self.fds.pop(fd, None)

    def mkdir(self, path: Path) -> None:
        with self.journal.lock:
            super().mkdir(path)
            self._entry(path, DIR)

    def rmdir(self, path: Path) -> None:
        with self.journal.lock:
            super().rmdir(path)
            self._entry(path, None)

    def link(self, src: Path, dst: Path) -> None:
        with self.journal.lock:
            super().link(src, dst)
            rel = self._rel(src)
            if rel is not None:
                self._entry(dst, self.journal.names[rel])

    def rename(self, src: Path, dst: Path) -> None:
        with self.journal.lock:
            super().rename(src, dst)
            s, d = self._rel(src), self._rel(dst)
            if s is None or d is None:
                return
            inode = self.journal.names.pop(s)
            self.journal.names[d] = inode
            pair = self.journal.new_pair()
            self.journal.record(Entry(s, None, pair, "from"), Entry(d, inode, pair, "to"))

    def unlink(self, path: Path) -> None:
        with self.journal.lock:
            super().unlink(path)
            rel = self._rel(path)
            if rel is not None:
                self.journal.names.pop(rel, None)
                self.journal.record(Entry(rel, None))

    def fsync_dir(self, path: Path) -> None:
        with self.journal.lock:
            super().fsync_dir(path)
            rel = self._rel(path)
            if rel is not None:
                self.journal.record(DirSync(rel))

    def _entry(self, path: Path, target: int | str | None) -> None:
        rel = self._rel(path)
        if rel is None:
            return
        if target is None or target == DIR:
            self.journal.names.pop(rel, None)
        else:
            assert isinstance(target, int)
            self.journal.names[rel] = target
        self.journal.record(Entry(rel, target))


@contextlib.contextmanager
def commits_recorded(journal: Journal) -> Iterator[None]:
    """Record each index commit (its database as committed) in the journal, in order with the file calls."""
    real = SqliteIndex.write

    @contextlib.asynccontextmanager
    async def write(self: SqliteIndex) -> AsyncIterator[Any]:
        async with real(self) as db:
            yield db
        journal.commit(self.path)

    SqliteIndex.write = write  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        SqliteIndex.write = real  # type: ignore[method-assign]


# -- exploring ----------------------------------------------------------------------------------------


@dataclass
class Explored:
    events: int = 0
    built: int = 0  # states built, duplicates included
    distinct: int = 0
    checked: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        return (
            f"{self.events} events, {self.built} states built, {self.distinct} distinct, {self.checked} "
            f"checked in {self.seconds:.1f} s"
        )


Check = Callable[[Path, "State"], Awaitable[None]]


async def explore(
    journal: Journal,
    check: Check,
    where: Path,
    *,
    seed: int,
    per_cut: int = 256,
    budget: int = 120,
) -> Explored:
    """Every cut of the journal, its states (`per_cut` combinations at most, drawn past that), the distinct
    ones checked: all of them up to `budget`, else the worst state of each cut and a seeded draw of the
    others. Raises Lost if a check fails: each distinct failure with the first state that shows it, and the
    seed."""
    started = time.monotonic()
    rng = random.Random(seed)
    found = Explored(events=len(journal.events))
    worst: dict[tuple[Any, ...], State] = {}
    others: dict[tuple[Any, ...], State] = {}
    for cut in range(len(journal.events) + 1):
        for n, state in enumerate(journal.states(cut, rng, per_cut)):
            found.built += 1
            key = state.key()
            if key in worst or key in others:
                continue
            (worst if n == 0 else others)[key] = state
    found.distinct = len(worst) + len(others)
    chosen = list(worst.values())
    rest = list(others.values())
    room = max(budget - len(chosen), 0)
    chosen += rest if len(rest) <= room else rng.sample(rest, room)
    chosen.sort(key=lambda s: s.cut)
    failures: dict[str, str] = {}  # each distinct failure, with the first state that shows it
    failed = 0
    for state in chosen:
        state.materialize(where)
        try:
            await check(where, state)
        except Lost as e:
            failed += 1
            failures.setdefault(str(e), f"{e}\n    in {state.describe()}")
        found.checked += 1
    found.seconds = time.monotonic() - started
    if failures:
        shown = "\n  ".join(failures.values())
        raise Lost(f"{failed} of {found.checked} states fail (seed {seed}):\n  {shown}")
    return found
