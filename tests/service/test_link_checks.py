"""The keyed check of a variant link: bound to the source, the spec and the variant, apart from the checks of
objects; recorded when a link is published, verified before one is followed. A link without one (older than
link checks, as schema 10 leaves them; or another key's) is derived again once, on first use, and linked
with a check; one that does not hold is never followed, and the audit reports it."""

from __future__ import annotations

import sqlite3

import pytest

from attachstore.maintenance import Audit, Kind
from attachstore.refs import Checker
from attachstore.service import Store, Upload
from attachstore.service.previews import preview_spec
from tests.conftest import MakeConfig
from tests.service.test_normalization import CountDerivations
from tests.support.images import png

KEY, OTHER = bytes.fromhex("11" * 32), bytes.fromhex("22" * 32)
S, T = "sha256:" + "a" * 64, "sha256:" + "b" * 64
V, W = "sha256:" + "c" * 64, "sha256:" + "d" * 64
SPEC = preview_spec(64).key


def test_a_link_check_binds_its_source_spec_and_variant_under_its_key() -> None:
    checker = Checker(KEY)
    check = checker.link(S, SPEC, V)
    assert check.startswith(f"v2:{checker.key_id}:")
    assert checker.link_holds(check, S, SPEC, V)
    assert not checker.link_holds(check, T, SPEC, V)  # copied to another source's link
    assert not checker.link_holds(check, S, preview_spec(128).key, V)  # to another spec
    assert not checker.link_holds(check, S, SPEC, W)  # the link repointed
    assert not checker.link_holds(None, S, SPEC, V)
    assert not Checker(OTHER).link_holds(check, S, SPEC, V)
    assert not Checker(OTHER).link_holds(Checker(OTHER).link(S, SPEC, V), S, SPEC, W)
    # The fields are framed: none runs into the next.
    assert checker.link(S, "x", "y" + V) != checker.link(S, "xy", V)


def test_a_link_check_and_an_object_check_never_stand_for_each_other() -> None:
    checker = Checker(KEY)
    link = checker.link(S, SPEC, V)
    assert not checker.holds(link, S, 0, "", b"")
    assert not checker.link_holds(checker.of(S, 0, "", b""), S, SPEC, V)


@pytest.fixture
async def store(make_config: MakeConfig) -> Store:
    s = await Store.open(make_config(integrity={"check_key": "11" * 32}))
    yield s  # type: ignore[misc]
    await s.close()


async def _previewed(store: Store) -> tuple[str, str, bytes]:
    """A source with its preview of 64 made and linked: the source, the preview's ref and bytes."""
    result = await store.admit([Upload.of_bytes(png(300, 200))], "user")
    source = result.attachments[0].ref
    preview, data = await store.preview(source, 64, "")
    return source, preview.ref, bytes(data)


def _set_link(store: Store, source: str, variant: str | None = None, check: str | None = "keep") -> None:
    with sqlite3.connect(store.config.data_path / "index.sqlite3") as db:
        if variant is not None:
            db.execute("UPDATE variants SET variant = ? WHERE source = ?", (variant, source))
        if check != "keep":
            db.execute("UPDATE variants SET link_check = ? WHERE source = ?", (check, source))
    db.close()


def _refused(store: Store, reason: str) -> float:
    found = store.metrics.registry.get_sample_value(
        "attachstore_variant_links_refused_total", {"reason": reason}
    )
    return found or 0.0


async def test_a_published_link_records_its_check_and_is_followed(store: Store) -> None:
    source, preview, data = await _previewed(store)
    link = await store.index.variant(source, SPEC)
    assert link is not None
    assert link.check == store.checker.link(source, SPEC, preview)
    counter = CountDerivations(store)
    got, again = await store.preview(source, 64, "")
    assert (got.ref, bytes(again), counter.calls) == (preview, data, 0)
    assert await store.preview_ref(source, 64, "") == preview


@pytest.mark.parametrize("check", [None, Checker(OTHER).link], ids=["none", "another key's"])
async def test_a_link_without_a_check_of_this_key_is_derived_again_once(store: Store, check: object) -> None:
    """As schema 10 leaves the links made before it (or a store copied from one with another key)."""
    source, preview, data = await _previewed(store)
    _set_link(store, source, check=check(source, SPEC, preview) if callable(check) else None)
    assert await store.preview_ref(source, 64, "") is None  # no preview to name until it is derived again
    counter = CountDerivations(store)

    got, again = await store.preview(source, 64, "")
    assert (got.ref, bytes(again)) == (preview, data)  # the same bytes, derived again
    assert counter.calls == 1
    assert (_refused(store, "unchecked"), _refused(store, "mismatch")) == (1, 0)
    link = await store.index.variant(source, SPEC)
    assert link is not None
    assert store.checker.link_holds(link.check, source, SPEC, preview)
    await store.preview(source, 64, "")
    assert counter.calls == 1  # followed from then on


async def test_a_repointed_link_is_not_followed_and_the_audit_reports_it(store: Store) -> None:
    source, preview, data = await _previewed(store)
    other = (await store.admit([Upload.of_bytes(png(40, 30, seed=5))], "user")).attachments[0].ref
    _set_link(store, source, variant=other)

    report = await Audit(store, settle=0).run()
    assert [(f.kind, f.ref, f.repair) for f in report.findings] == [(Kind.LINK_MISMATCH, source, None)]
    assert (report.links, report.links_unchecked) == (1, 0)

    assert await store.preview_ref(source, 64, "") is None
    got, again = await store.preview(source, 64, "")
    assert (got.ref, bytes(again)) == (preview, data)
    assert _refused(store, "mismatch") == 1
    assert (await Audit(store, settle=0).run()).clean  # linked again, with a check that holds


async def test_the_audit_repair_removes_a_link_whose_check_does_not_hold(store: Store) -> None:
    source, preview, _ = await _previewed(store)
    _set_link(store, source, check=store.checker.link(source, SPEC, "sha256:" + "e" * 64))
    report = await Audit(store, repair=True, settle=0).run()
    assert [(f.kind, f.repair) for f in report.findings] == [
        (Kind.LINK_MISMATCH, "removed the link (the variant is derived again when next wanted)")
    ]
    assert await store.index.variant(source, SPEC) is None
    assert await store.index.get(preview) is not None  # the variant stays, for gc
    assert (await Audit(store, settle=0).run()).clean
    assert (await store.preview(source, 64, ""))[0].ref == preview  # derived and linked again
    link = await store.index.variant(source, SPEC)
    assert link is not None
    assert store.checker.link_holds(link.check, source, SPEC, preview)


async def test_the_audit_counts_links_without_a_check_and_leaves_them(store: Store) -> None:
    source, _, _ = await _previewed(store)
    _set_link(store, source, check=None)
    report = await Audit(store, repair=True, settle=0).run()
    assert report.clean
    assert (report.links, report.links_unchecked) == (1, 1)
    assert await store.index.variant(source, SPEC) is not None
