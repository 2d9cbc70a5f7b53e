"""Garbage collection: what is garbage, what is kept, and the sweep's protocol against admissions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from attachstore.cli import main
from attachstore.errors import NotFound
from attachstore.maintenance import gc
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from tests.support.images import gif, png
from tests.support.store import age


async def put(store: Store, *images: bytes, session: str | None = None) -> list[str]:
    result = await store.admit([Upload.of_bytes(i) for i in images], "user", session=session)
    return [a.ref for a in result.attachments]


async def test_garbage_is_unheld_unrooted_and_past_its_grace(store: Store, tmp_path: Path) -> None:
    loose, held, rooted, young = png(3, 3), png(4, 4), png(5, 5), png(6, 6)
    await store.sessions.create(("", "s"), None)
    [loose_ref] = await put(store, loose)
    await put(store, held, session="s")
    [rooted_ref] = await put(store, rooted)
    await age(store, 3600)
    [young_ref] = await put(store, young)
    log = tmp_path / "session.jsonl"
    log.write_text(json.dumps({"role": "user", "content": [{"type": "image", "ref": rooted_ref}]}) + "\n")

    plan = await gc.plan(store, grace=600, roots=[log])
    assert [r.ref for r in plan.garbage] == [loose_ref]
    assert plan.rooted == 1
    result = await gc.execute(store, plan)
    assert (result.collected, result.skipped) == ([loose_ref], 0)
    assert result.collected_bytes == len(loose)
    with pytest.raises(NotFound):
        await store.read(loose_ref)
    assert store.local.stat(Ref.parse(loose_ref)) is None
    for ref in (rooted_ref, young_ref):
        await store.read(ref)


async def test_a_released_session_starts_the_grace_period_at_the_release(store: Store) -> None:
    await store.sessions.create(("", "s"), None)
    [ref] = await put(store, png(7, 7), session="s")
    await age(store, 3600)
    await store.sessions.delete(("", "s"))
    assert (await gc.plan(store, grace=600)).garbage == []
    assert [r.ref for r in (await gc.plan(store, grace=0)).garbage] == [ref]


async def test_dry_run_plan_changes_nothing(store: Store) -> None:
    [ref] = await put(store, png(8, 8))
    plan = await gc.plan(store, grace=0)
    assert [r.ref for r in plan.garbage] == [ref]
    await store.read(ref)


async def test_an_admission_between_plan_and_sweep_keeps_its_object(store: Store) -> None:
    image = png(9, 9)
    [ref] = await put(store, image)
    plan = await gc.plan(store, grace=0)
    assert [r.ref for r in plan.garbage] == [ref]
    await put(store, image)  # dedup: renews the lease first
    result = await gc.execute(store, plan)
    assert (result.collected, result.skipped) == ([], 1)
    _, data = await store.read(ref)
    assert data == image


async def test_a_hold_between_plan_and_sweep_keeps_its_object(store: Store) -> None:
    [ref] = await put(store, png(10, 10))
    plan = await gc.plan(store, grace=-1)  # even a lease renewed now is past this grace
    await store.sessions.create(("", "s"), None)
    await store.sessions.hold(("", "s"), [ref])
    assert (await gc.execute(store, plan)).skipped == 1
    await store.read(ref)


async def test_admitting_after_collection_writes_the_bytes_again(store: Store) -> None:
    image = gif(6, 6)
    [ref] = await put(store, image)
    await gc.execute(store, await gc.plan(store, grace=0))
    assert await put(store, image) == [ref]
    _, data = await store.read(ref)
    assert data == image


async def test_leftovers_staging_unindexed_and_empty_directories(store: Store) -> None:
    staging = store.local.staging / "left.tmp"
    staging.write_bytes(b"half an image")
    stray = png(11, 11)
    stray_ref = Ref.of("sha256", stray)
    path = store.local.path(stray_ref)
    path.parent.mkdir(parents=True)
    path.write_bytes(stray)  # a crash between the link and the commit leaves exactly this
    [kept] = await put(store, png(12, 12))
    await store.sessions.create(("", "s"), None)
    await store.sessions.hold(("", "s"), [kept])

    fresh = await gc.plan(store, grace=600)
    assert (fresh.staging, fresh.unindexed) == ([], [])
    await age(store, 3600)
    plan = await gc.plan(store, grace=600)
    assert [f.path for f in plan.staging] == [staging]
    assert [f.ref for f in plan.unindexed] == [stray_ref]
    result = await gc.execute(store, plan)
    assert (result.staging_removed, result.unindexed_removed, result.empty_dirs_removed) == (1, 1, 2)
    assert not staging.exists()
    assert not path.parent.exists()
    await store.read(kept)


async def test_an_unindexed_file_published_meanwhile_is_kept(store: Store) -> None:
    image = png(13, 13)
    ref = Ref.of("sha256", image)
    path = store.local.path(ref)
    path.parent.mkdir(parents=True)
    path.write_bytes(image)
    await age(store, 3600)
    plan = await gc.plan(store, grace=600)
    assert [f.ref for f in plan.unindexed] == [ref]
    await put(store, image)  # adopts the file and publishes it
    assert (await gc.execute(store, plan)).unindexed_removed == 0
    await store.read(str(ref))


def test_roots_are_found_anywhere_in_files_and_directories(tmp_path: Path) -> None:
    a, b = "sha256:" + "a" * 64, "blake3:" + "b" * 64
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "one.jsonl").write_text(f'{{"ref": "{a}"}}\nnoise sha256:{"c" * 10}\n')
    big = tmp_path / "logs" / "big.log"
    # A ref straddling the boundary of the 1 MiB read chunks is still found.
    big.write_bytes(b"x" * ((1 << 20) - 30) + b.encode() + b"\n")
    assert gc.scan_roots([tmp_path / "logs"]) == {a, b}


def test_gc_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    image = tmp_path / "a.png"
    image.write_bytes(png(14, 14))
    assert main(["put", *data, str(image)]) == 0
    ref = capsys.readouterr().out.split()[0]

    assert main(["gc", *data, "--grace", "0s", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would collect {ref}" in out
    assert "1 object: 0 held, 0 within the grace period, 0 kept by roots, 1 to collect" in out
    assert main(["stat", *data, ref]) == 0
    capsys.readouterr()

    assert main(["gc", *data, "--grace", "0s", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["plan"]["garbage"] == [ref]
    assert report["result"]["collected"] == [ref]
    assert main(["stat", *data, ref]) == 1

    assert main(["gc", *data, "--grace", "soon"]) == 2
    assert "--grace" in capsys.readouterr().err
    assert main(["gc", "--data-dir", str(tmp_path / "nowhere")]) == 2


def test_gc_default_grace_comes_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[gc]\ngrace = "1h"\n')
    image = tmp_path / "a.png"
    image.write_bytes(png(15, 15))
    assert main(["put", "--config", str(config), str(image)]) == 0
    assert main(["gc", "--config", str(config), "--json"]) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    assert json.loads(out)["plan"]["garbage"] == []


async def test_files_without_a_row_are_left_alone_while_they_may_be_in_flight(store: Store) -> None:
    (store.local.staging / "writing.tmp").write_bytes(b"an admission is writing this")
    image = png(17, 17)
    path = store.local.path(Ref.of("sha256", image))
    path.parent.mkdir(parents=True)
    path.write_bytes(image)  # linked, not yet committed
    plan = await gc.plan(store, grace=0)
    assert (plan.staging, plan.unindexed) == ([], [])
    later = await gc.plan(store, grace=0, now=time.time() + 120)
    assert (len(later.staging), len(later.unindexed)) == (1, 1)
