"""`attachstore migrate`: a single-node store copied into S3 + PostgreSQL (and local + PostgreSQL), resumed
after a failure, and verified.

The sources are built through the service, as a daemon would have: two tenants naming one image each their
own way, sessions with holds made at different times, a fork, a variant derived by a render, a gc run, an
object damaged on disk and one whose loss a read already recorded. The servers come from tests/support.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from attachstore import cli
from attachstore.config import Config, Route, load
from attachstore.errors import Missing, StorageUnavailable
from attachstore.index import SessionRow
from attachstore.index.postgres import PgIndex
from attachstore.maintenance import gc
from attachstore.maintenance.migrate import JOBS
from attachstore.refs import Ref
from attachstore.render import RenderRequest, render
from attachstore.render.plan import variant_spec
from attachstore.service import Store, Upload
from attachstore.storage.s3 import S3BlobStore
from attachstore.text import human_bytes
from tests.support import fixtures, images, services
from tests.support.faults import flip_byte
from tests.support.fixtures import S3Server

TENANTS = [
    {"name": "alpha", "token_sha256": hashlib.sha256(b"alpha").hexdigest()},
    {"name": "beta", "token_sha256": hashlib.sha256(b"beta").hexdigest()},
]
ROUTES = {
    "small": {"input_modalities": ["text", "image"], "provider": "openai-chat", "max_request_side": 512}
}


def spec() -> str:
    """The key of the variants the route "small" asks for."""
    found = variant_spec(msgspec.convert(ROUTES["small"], Route), 1)
    assert found is not None
    return found.key


def migrate(
    capsys: pytest.CaptureFixture[str], source: Path, target: Path, *flags: str
) -> tuple[int, Any, str]:
    """Run the command; the JSON report (or the text, without --json) and standard error."""
    code = cli.main(["migrate", "--data-dir", str(source), "--to", str(target), *flags])
    out, err = capsys.readouterr()
    return code, json.loads(out) if "--json" in flags and out else out, err


# -- sources ----------------------------------------------------------------------------------------------


@dataclass
class Source:
    data_dir: Path
    refs: dict[str, str] = field(default_factory=dict)  # label -> ref
    data: dict[str, bytes] = field(default_factory=dict)  # ref -> its bytes
    gone: set[str] = field(default_factory=set)  # refs it cannot give
    seen: dict[str, Any] = field(default_factory=dict)  # observe() before the migration
    files: dict[str, str] = field(default_factory=dict)  # every file of the data dir -> sha256 of it

    @property
    def good(self) -> set[str]:
        return set(self.refs.values()) - self.gone

    async def admit(
        self, store: Store, tenant: str, files: dict[str, bytes], session: str | None = None
    ) -> None:
        uploads = [Upload.of_bytes(data, name=name) for name, data in files.items()]
        admission = await store.admit(uploads, "user", session=session, tenant=tenant)
        for name, a in zip(files, admission.attachments, strict=True):
            self.refs.setdefault(name.split(".")[0], a.ref)
            self.data[a.ref] = files[name]

    async def observe(self, store: Store) -> None:
        self.seen = await observe(store, list(self.refs.values()), self.sessions, self.refs.get("big"))

    @property
    def sessions(self) -> list[tuple[str, str]]:
        return [("alpha", "s1"), ("alpha", "s2"), ("alpha", "idle"), ("beta", "s1")]


def source_config(data_dir: Path) -> Config:
    raw = {
        "data_dir": str(data_dir),
        "routes": ROUTES,
        "tenants": TENANTS,
        "admission": {"decode_workers": 1},
    }
    return msgspec.convert(raw, Config)


def tree(data_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(data_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


async def build_rich(data_dir: Path) -> Source:
    source = Source(data_dir)
    store = await Store.open(source_config(data_dir), workers=1)
    try:
        for tenant in ("alpha", "beta"):
            await store.sessions.create((tenant, "s1"), "small")
        await store.sessions.create(("alpha", "idle"), None, 86400)  # a lifetime, copied too
        # beta names the shared image first: the object keeps beta's name, and each tenant its own.
        shared = images.png(50, 20, seed=2)
        await source.admit(store, "beta", {"shared.png": shared, "b.jpg": images.jpeg(64, 48)}, "s1")
        await source.admit(
            store, "alpha", {"a.png": images.png(40, 30, seed=1), "from-alpha.png": shared}, "s1"
        )
        big = {"big.jpg": images.jpeg(1024, 768), "damaged.png": images.png(30, 30, seed=3)}
        await source.admit(store, "alpha", big, "s1")
        await source.admit(store, "alpha", {"lost.png": images.png(20, 20, seed=4)})
        await source.admit(store, "alpha", {f"n{i}.png": images.png(16, 16, seed=10 + i) for i in range(12)})
        await store.sessions.fork(("alpha", "s1"), "s2")
        await store.sessions.hold(("alpha", "s2"), [source.refs["n0"], source.refs["n1"]])
        image = {"type": "image", "ref": source.refs["big"]}
        request = {"route": "small", "messages": [{"role": "user", "content": [image]}]}
        await render(store, msgspec.convert(request, RenderRequest), tenant="alpha")
        link = await store.index.variant(source.refs["big"], spec())
        assert link is not None
        variant = link.row
        source.refs["variant"] = variant.ref
        source.data[variant.ref] = await store.blobs.read(Ref.parse(variant.ref), variant.bytes)
        await gc.execute(store, await gc.plan(store, grace=10 * 365 * 86400))

        damaged, lost = source.refs["damaged"], source.refs["lost"]
        source.gone = {damaged, lost}
        assert store.local is not None
        flip_byte(store.local.path(Ref.parse(damaged)))
        os.unlink(store.local.path(Ref.parse(lost)))
        with pytest.raises(Missing):
            await store.read(lost)  # the index now marks it missing
        await source.observe(store)
    finally:
        await store.close()
    source.files = tree(data_dir)
    return source


async def build_clean(data_dir: Path) -> Source:
    source = Source(data_dir)
    store = await Store.open(source_config(data_dir), workers=1)
    try:
        await store.sessions.create(("beta", "s1"), "small")
        await source.admit(
            store, "alpha", {"x.png": images.png(24, 24, seed=20), "y.png": images.png(25, 25, seed=21)}
        )
        await source.admit(store, "beta", {"z.png": images.png(26, 26, seed=22)}, "s1")
        await source.observe(store)
    finally:
        await store.close()
    source.files = tree(data_dir)
    return source


async def observe(
    store: Store, refs: list[str], sessions: list[tuple[str, str]], big: str | None
) -> dict[str, Any]:
    """Everything a client or an operator can see of these refs and sessions."""
    rows = {r: await store.index.get(r) for r in refs}
    names = {
        t: {r: row.name for r, row in (await store.index.get_many(refs, t)).items()}
        for t in ("", "alpha", "beta")
    }
    found: dict[tuple[str, str], SessionRow | None] = {k: await store.index.get_session(k) for k in sessions}
    variant = await store.index.variant(big, spec()) if big else None
    return {
        "rows": rows,
        "names": names,
        "sessions": found,
        "variant": variant,
        "runs": await store.index.runs(),
    }


def expected(source: Source) -> dict[str, Any]:
    """What the source showed, without what it could not give."""
    seen, gone = source.seen, source.gone
    return {
        "rows": {r: row for r, row in seen["rows"].items() if r not in gone},
        "names": {t: {r: n for r, n in names.items() if r not in gone} for t, names in seen["names"].items()},
        "sessions": {
            k: s if s is None else dataclasses.replace(s, holds=tuple(h for h in s.holds if h not in gone))
            for k, s in seen["sessions"].items()
        },
        "variant": seen["variant"],
        "runs": seen["runs"],
    }


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return asyncio.run(build_rich(tmp_path_factory.mktemp("rich") / "data"))


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Source:
    return asyncio.run(build_clean(tmp_path_factory.mktemp("clean") / "data"))


# -- targets ----------------------------------------------------------------------------------------------

NewTarget = Callable[..., Path]


@pytest.fixture(scope="module")
def new_target() -> Iterator[NewTarget]:
    """`new_target(path, s3=True, data_dir=None)`: a configuration naming a fresh database, and a fresh
    bucket unless `s3` is False (then `data_dir` holds the objects). All are removed at the end."""
    databases: list[str] = []
    with contextlib.ExitStack() as buckets:

        def new(path: Path, *, s3: bool = True, data_dir: Path | None = None) -> Path:
            databases.append(fixtures.fresh_database())
            server = fixtures.require_s3() if s3 else None
            bucket = buckets.enter_context(fixtures.bucket(server)) if server else None
            return write_target(path, dsn=databases[-1], s3=server, bucket=bucket, data_dir=data_dir)

        yield new
    # Each DROP waits for a checkpoint; side by side they share one.
    with ThreadPoolExecutor(max_workers=len(databases) or 1) as pool:
        list(pool.map(fixtures.drop_database, databases))


def write_target(
    path: Path,
    *,
    dsn: str,
    s3: S3Server | None = None,
    bucket: str | None = None,
    data_dir: Path | None = None,
) -> Path:
    sections: dict[str, dict[str, Any]] = {"index": {"backend": "postgresql", "dsn": dsn}}
    if s3 is not None:
        sections["storage"] = {
            "backend": "s3",
            "endpoint": s3.endpoint,
            "bucket": bucket,
            "region": s3.region,
            "access_key_id": s3.access_key,
            "secret_access_key": s3.secret_key,
        }
    sections |= {f"routes.{name}": route for name, route in ROUTES.items()}
    lines = [f"data_dir = {json.dumps(str(data_dir))}"] if data_dir else []
    for name, values in sections.items():
        lines += [f"[{name}]", *(f"{k} = {json.dumps(v)}" for k, v in values.items())]
    for tenant in TENANTS:
        lines += ["[[tenants]]", *(f"{k} = {json.dumps(v)}" for k, v in tenant.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


async def with_target(path: Path, action: Callable[[Store], Awaitable[Any]]) -> Any:
    store = await Store.open(load(str(path), env={}), workers=1)
    try:
        return await action(store)
    finally:
        await store.close()


def observe_target(path: Path, source: Source) -> dict[str, Any]:
    refs, big = sorted(source.good), source.refs.get("big")
    return asyncio.run(with_target(path, lambda s: observe(s, refs, source.sessions, big)))


def key(ref: str) -> str:
    """Where an object lives, below the data dir or in the bucket."""
    digest = Ref.parse(ref).digest
    return f"objects/sha256/{digest[:2]}/{digest[2:4]}/{digest}"


def bucket_listing(path: Path) -> dict[str, int]:
    bucket = load(str(path), env={}).storage.bucket
    with services.s3_client(fixtures.require_s3().as_services()) as c:
        pages = c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="objects/")
        return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", ())}


@dataclass(frozen=True)
class Reference:
    """The rich source migrated once, uninterrupted, into S3 + PostgreSQL."""

    target: Path
    code: int
    report: dict[str, Any]
    seen: dict[str, Any]  # observe_target() after it
    listing: dict[str, int]


@pytest.fixture(scope="module")
def reference(rich: Source, new_target: NewTarget, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    target = new_target(tmp_path_factory.mktemp("reference") / "target.toml")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = cli.main(["migrate", "--data-dir", str(rich.data_dir), "--to", str(target), "--json"])
    return Reference(
        target, code, json.loads(out.getvalue()), observe_target(target, rich), bucket_listing(target)
    )


# -- the copy ---------------------------------------------------------------------------------------------


def test_copies_a_store_into_s3_and_postgresql(rich: Source, reference: Reference) -> None:
    code, report = reference.code, reference.report
    # The damaged object is found and not copied; the one the source knew lost is reported; nothing differs.
    assert code == 1
    assert [(f["kind"], f["what"]) for f in report["failed"]] == [("corrupt", rich.refs["damaged"])]
    assert ("missing", rich.refs["lost"]) in [(f["kind"], f["what"]) for f in report["not_copied"]]
    assert ("hold", "alpha/s1") in [(f["kind"], f["what"]) for f in report["not_copied"]]
    assert report["differences"] == []
    assert (report["objects"], report["skipped"], report["verified"]) == (len(rich.good), 0, len(rich.good))
    assert report["bytes"] == sum(len(rich.data[r]) for r in rich.good)
    assert (report["sessions"], report["variants"], report["runs"]) == (4, 1, 1)

    assert reference.seen == expected(rich)

    async def reads(store: Store) -> None:
        for ref in rich.good:
            meta, data = await store.read(ref)
            assert data == rich.data[ref]
            assert meta == await store.meta(ref)
        # Each tenant sees its own name for the shared image, and nothing of the other's.
        shared = rich.refs["shared"]
        assert (await store.meta(shared, "alpha")).name == "from-alpha.png"
        assert (await store.meta(shared, "beta")).name == "shared.png"
        assert (await store.meta(shared)).name == "shared.png"
        assert await store.index.get(rich.refs["a"], "beta") is None
        for gone in (rich.refs["damaged"], rich.refs["lost"]):
            assert await store.index.get(gone) is None
        assert (await store.sessions.get(("alpha", "s2"))).holds[-2:] == (rich.refs["n0"], rich.refs["n1"])

    asyncio.run(with_target(reference.target, reads))
    assert set(reference.listing) == {key(r) for r in rich.good}
    assert tree(rich.data_dir) == rich.files  # the source is left as it was


@pytest.mark.parametrize("where", ["put", "publish", "add_holds"])
def test_an_interrupted_migration_continues_where_it_stopped(
    where: str,
    rich: Source,
    reference: Reference,
    new_target: NewTarget,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_target(tmp_path / "target.toml")
    owner: Any = S3BlobStore if where == "put" else PgIndex
    original = getattr(owner, where)
    calls = 0

    async def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > {"put": 6, "publish": 1, "add_holds": 2}[where]:
            raise StorageUnavailable("injected: the network went away")
        return await original(*args, **kwargs)

    monkeypatch.setattr(owner, where, failing)
    code, _, err = migrate(capsys, rich.data_dir, target, "--json")
    assert (code, "STORAGE_UNAVAILABLE: injected" in err) == (1, True)
    monkeypatch.setattr(owner, where, original)
    done = asyncio.run(with_target(target, lambda s: s.index.refs()))

    puts, flight, most = 0, 0, 0
    put = S3BlobStore.put

    async def counting(self: S3BlobStore, ref: Ref, data: bytes) -> Any:
        nonlocal puts, flight, most
        puts, flight = puts + 1, flight + 1
        most = max(most, flight)
        try:
            return await put(self, ref, data)
        finally:
            flight -= 1

    monkeypatch.setattr(S3BlobStore, "put", counting)
    code, report, _ = migrate(capsys, rich.data_dir, target, "--json")
    assert code == 1  # the damaged source object, as in an uninterrupted run
    assert report["differences"] == []
    # What was published before the failure is not copied again; the rest is, at most JOBS at once.
    assert (report["skipped"], report["objects"], puts) == (
        len(done),
        len(rich.good - done),
        len(rich.good - done),
    )
    assert most <= JOBS
    if where == "add_holds":
        assert (puts, report["sessions"] < 4, report["holds"] > 0) == (0, True, True)
    assert observe_target(target, rich) == reference.seen == expected(rich)
    assert bucket_listing(target) == reference.listing


def test_verify_only_finds_damage_and_a_run_repairs_it(
    clean: Source, new_target: NewTarget, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = new_target(tmp_path / "target.toml")
    code, report, _ = migrate(capsys, clean.data_dir, target, "--json")
    assert (code, report["clean"], report["objects"]) == (0, True, 3)
    assert migrate(capsys, clean.data_dir, target, "--verify-only", "--json")[0] == 0

    # Damage one object in the bucket, behind the store's back, and delete another's row.
    x, y = clean.refs["x"], clean.refs["y"]
    config = load(str(target), env={})
    damaged = bytearray(clean.data[x])
    damaged[-1] ^= 1
    with services.s3_client(fixtures.require_s3().as_services()) as c:
        c.put_object(Bucket=config.storage.bucket, Key=key(x), Body=bytes(damaged))

    async def delete_row() -> None:
        db = await asyncpg.connect(config.index.dsn)
        try:
            await db.execute("DELETE FROM objects WHERE ref = $1", y)
        finally:
            await db.close()

    asyncio.run(delete_row())
    code, report, _ = migrate(capsys, clean.data_dir, target, "--verify-only", "--json")
    assert code == 1
    assert {(d["kind"], d["what"]) for d in report["differences"]} == {
        ("bytes", x),
        ("object", y),
        ("grant", y),
    }
    assert report["objects"] == 0  # nothing copied

    code, out, _ = migrate(capsys, clean.data_dir, target)
    assert code == 0
    size, total = human_bytes(len(clean.data[y])), human_bytes(sum(map(len, clean.data.values())))
    assert out.splitlines() == [
        f"migrate: 1 object ({size}) copied, 2 already in the target, 0 failed, 0 not copied (marked "
        "unreadable in the source); 0 sessions, 0 holds, 0 variants, 0 runs added",
        f"verify: 3 objects ({total}) read back verified, 1 written again, every row compared: "
        "no differences",
    ]
    assert migrate(capsys, clean.data_dir, target, "--verify-only", "--json")[0] == 0
    assert observe_target(target, clean) == expected(clean)


def test_local_files_and_sqlite_into_local_files_and_postgresql(
    clean: Source, new_target: NewTarget, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = new_target(tmp_path / "target.toml", s3=False, data_dir=tmp_path / "new")
    code, out, _ = migrate(capsys, clean.data_dir, target)
    assert code == 0, out
    assert observe_target(target, clean) == expected(clean)
    for ref in clean.good:
        assert (tmp_path / "new" / key(ref)).read_bytes() == clean.data[ref]
    assert tree(clean.data_dir) == clean.files

    # A daemon on the target renews a lease; running the command again never moves it back.
    x = clean.refs["x"]
    later = clean.seen["rows"][x].lease_at + 3600
    asyncio.run(with_target(target, lambda s: s.index.renew([x], later)))
    code, report, _ = migrate(capsys, clean.data_dir, target, "--json")
    assert code == 1
    assert [(d["kind"], d["what"]) for d in report["differences"]] == [("object", x)]
    assert report["differences"][0]["detail"].startswith("lease_at: ")
    assert asyncio.run(with_target(target, lambda s: s.index.get(x))).lease_at == later


# -- refusals ---------------------------------------------------------------------------------------------


def test_refusals(clean: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def target(text: str) -> Path:
        path = tmp_path / f"target-{len(list(tmp_path.iterdir()))}.toml"
        path.write_text(text)
        return path

    same = target(f"data_dir = {json.dumps(str(clean.data_dir))}\n")
    code, _, err = migrate(capsys, clean.data_dir, same)
    assert (code, "the target is the source" in err) == (2, True)

    no_dir = target('[index]\nbackend = "postgresql"\ndsn = "postgresql://x@127.0.0.1:1/x"\n')
    code, _, err = migrate(capsys, clean.data_dir, no_dir)
    assert (code, "data_dir" in err) == (2, True)

    code, _, err = migrate(capsys, tmp_path / "nothing", same)
    assert (code, "no attachstore store at" in err) == (2, True)

    for section in (
        '[storage]\nbackend = "s3"\nbucket = "b"\n',
        '[index]\nbackend = "postgresql"\ndsn = "postgresql://x@h/x"\n',
    ):
        config = tmp_path / "source.toml"
        config.write_text(f"data_dir = {json.dumps(str(clean.data_dir))}\n{section}")
        code = cli.main(["migrate", "--config", str(config), "--to", str(same)])
        err = capsys.readouterr().err
        key = "storage.backend" if "s3" in section else "index.backend"
        assert (code, f"attachstore: {key}: the source of a migration is a single-node store" in err) == (
            2,
            True,
        )


def test_an_unreachable_target_is_storage_unavailable(
    clean: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = "postgresql://postgres@127.0.0.1:1/nothing"
    target = write_target(tmp_path / "index.toml", dsn=nowhere, data_dir=tmp_path / "new")
    code, _, err = migrate(capsys, clean.data_dir, target)
    assert (code, err.split(": ")[:3]) == (
        1,
        ["attachstore", "STORAGE_UNAVAILABLE", "cannot connect to the PostgreSQL index"],
    )

    s3 = S3Server("http://127.0.0.1:1", "key", "secret", "us-east-1", None)
    target = write_target(tmp_path / "s3.toml", dsn=nowhere, s3=s3, bucket="bucket")
    code, _, err = migrate(capsys, clean.data_dir, target)
    assert (code, err.split(": ")[:2]) == (1, ["attachstore", "STORAGE_UNAVAILABLE"])
    assert "cannot reach the bucket 'bucket' at http://127.0.0.1:1" in err
    assert tree(clean.data_dir) == clean.files
