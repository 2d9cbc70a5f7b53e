"""The keyed check: recorded at admission, verified by reads in place of the sha256 address, bound to the ref,
size and media type of its row, gained by older rows (and rows whose check bound the bytes alone) on their
first verified read or from the audit; the audit still verifies the address in full."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import blake3
import msgspec
import pytest

from attachstore.config import Config, load
from attachstore.errors import ConfigError, Corrupt
from attachstore.maintenance import Audit, Kind
from attachstore.refs import Checker, Ref
from attachstore.service import Store, Upload
from attachstore.service.checkkey import checker, default_key_file
from tests.conftest import MakeConfig
from tests.support.images import png

KEY = "11" * 32
OTHER = "22" * 32


async def put(store: Store, image: bytes) -> str:
    result = await store.admit([Upload.of_bytes(image)], "user")
    return result.attachments[0].ref


def check_of(checker: Checker, image: bytes) -> str:
    """The check a row of `image`, as admitted (a PNG, stored as it came), records."""
    return checker.of(str(Ref.of("sha256", image)), len(image), "image/png", image)


def set_check(store: Store, ref: str, check: str | None) -> None:
    db = sqlite3.connect(store.config.data_path / "index.sqlite3")
    with db:
        db.execute("UPDATE objects SET keyed_check = ? WHERE ref = ?", (check, ref))
    db.close()
    if store.resident is not None:
        store.resident.forget(ref)


class Hashes:
    """Counts the sha256 (address) and keyed-check computations over object bytes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.address = self.keyed = 0
        matches, holds = Ref.matches, Checker.holds

        def count_matches(ref: Ref, data: bytes) -> bool:
            self.address += 1
            return matches(ref, data)

        def count_holds(c: Checker, check: str, ref: str, size: int, media_type: str, data: bytes) -> bool:
            self.keyed += 1
            return holds(c, check, ref, size, media_type, data)

        monkeypatch.setattr(Ref, "matches", count_matches)
        monkeypatch.setattr(Checker, "holds", count_holds)


@pytest.fixture
async def keyed(make_config: MakeConfig) -> Store:
    s = await Store.open(make_config(integrity={"check_key": KEY}))
    yield s  # type: ignore[misc]
    await s.close()


async def test_an_admission_records_the_keyed_check_of_the_stored_bytes(keyed: Store) -> None:
    image = png(20, 10)
    ref = await put(keyed, image)
    row = await keyed.index.get(ref)
    assert row is not None
    assert row.keyed_check == check_of(Checker(bytes.fromhex(KEY)), image)
    assert row.keyed_check != check_of(Checker(bytes.fromhex(OTHER)), image)


@pytest.mark.parametrize("size", [(20, 10), (700, 600)], ids=["resident", "over 1 MiB"])
async def test_a_read_verifies_by_the_keyed_check_not_the_address(
    keyed: Store, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    image = png(*size)
    ref = await put(keyed, image)
    hashes = Hashes(monkeypatch)
    for _ in range(2):
        _, data = await keyed.read(ref)
        assert bytes(data) == image
    assert (hashes.address, hashes.keyed) == (0, 2)


async def test_damaged_bytes_fail_the_keyed_check_and_are_quarantined(keyed: Store) -> None:
    image = png(20, 10, seed=3)
    ref = await put(keyed, image)
    path = keyed.config.data_path / "objects" / "sha256" / ref[7:9] / ref[9:11] / ref[7:]
    os.chmod(path, 0o644)
    path.write_bytes(image[:-8] + b"\xff" + image[-7:])
    with pytest.raises(Corrupt):
        await keyed.read(ref)
    assert not path.exists()


def unbound_check(key: str, image: bytes) -> str:
    """A check as schema 8 made them: `<key id>:<keyed BLAKE3 of the bytes alone>`."""
    return Checker(bytes.fromhex(key)).key_id + ":" + blake3.blake3(image, key=bytes.fromhex(key)).hexdigest()


@pytest.mark.parametrize(
    "old", [None, "another key", "the bytes alone"], ids=["no check", "another key", "the bytes alone"]
)
async def test_a_row_without_a_check_of_this_key_is_verified_by_address_and_gains_one(
    keyed: Store, monkeypatch: pytest.MonkeyPatch, old: str | None
) -> None:
    image = png(20, 10, seed=4)
    ref = await put(keyed, image)
    checks = {
        None: None,
        "another key": check_of(Checker(bytes.fromhex(OTHER)), image),
        "the bytes alone": unbound_check(KEY, image),
    }
    set_check(keyed, ref, checks[old])
    hashes = Hashes(monkeypatch)
    _, data = await keyed.read(ref)
    assert bytes(data) == image
    assert (hashes.address, hashes.keyed) == (1, 0)
    row = await keyed.index.get(ref)
    assert row is not None
    assert row.keyed_check == check_of(keyed.checker, image)
    await keyed.read(ref)
    assert (hashes.address, hashes.keyed) == (1, 1)


async def test_a_wrong_check_over_intact_bytes_serves_them_and_the_audit_finds_it(keyed: Store) -> None:
    image = png(20, 10, seed=5)
    ref = await put(keyed, image)
    forged = "v2:" + keyed.checker.key_id + ":" + "0" * 64
    assert keyed.checker.mine(forged)
    set_check(keyed, ref, forged)
    _, data = await keyed.read(ref)  # the address verifies them: served, counted
    assert bytes(data) == image
    assert keyed.metrics.registry.get_sample_value("attachstore_check_mismatches_total") == 1
    report = await Audit(keyed, settle=0).run()
    assert [(f.kind, f.ref) for f in report.findings] == [(Kind.METADATA_MISMATCH, ref)]
    assert "keyed check" in report.findings[0].detail
    await Audit(keyed, repair=True, settle=0).run()
    assert (await keyed.index.get(ref)).keyed_check == check_of(keyed.checker, image)  # type: ignore[union-attr]
    assert (await Audit(keyed, settle=0).run()).clean


async def test_a_check_made_for_other_bytes_does_not_hide_them_from_the_audit(keyed: Store) -> None:
    """Someone with the key replaces the bytes and records their check: reads would serve them, the audit
    still hashes every file to its address."""
    image, other = png(20, 10, seed=6), png(20, 10, seed=7)
    ref = await put(keyed, image)
    path = keyed.config.data_path / "objects" / "sha256" / ref[7:9] / ref[9:11] / ref[7:]
    os.chmod(path, 0o644)
    path.write_bytes(other)
    set_check(keyed, ref, keyed.checker.of(ref, len(other), "image/png", other))
    report = await Audit(keyed, settle=0).run()
    assert [(f.kind, f.ref) for f in report.findings] == [(Kind.CORRUPT, ref)]


async def test_a_check_copied_from_another_row_fits_nothing_there(keyed: Store) -> None:
    """Someone without the key copies another object's row (check, size, type, dimensions) onto a victim's
    and puts the other object's file at the victim's path: the check is bound to the other ref, so the read
    falls back to the victim's address, which the other bytes fail. Damaged, not served; and the audit says
    so too."""
    image, other = png(20, 10, seed=11), png(30, 12, seed=12)
    victim, source = await put(keyed, image), await put(keyed, other)
    db = sqlite3.connect(keyed.config.data_path / "index.sqlite3")
    with db:
        db.execute(
            """UPDATE objects SET (media_type, bytes, width, height, frames, keyed_check) =
            (SELECT media_type, bytes, width, height, frames, keyed_check FROM objects WHERE ref = ?)
            WHERE ref = ?""",
            (source, victim),
        )
    db.close()
    keyed.resident.forget(victim)  # type: ignore[union-attr]
    path = keyed.config.data_path / "objects" / "sha256" / victim[7:9] / victim[9:11] / victim[7:]
    os.chmod(path, 0o644)
    path.write_bytes(other)
    report = await Audit(keyed, settle=0).run()
    assert [(f.kind, f.ref) for f in report.findings] == [(Kind.CORRUPT, victim)]
    with pytest.raises(Corrupt):
        await keyed.read(victim)
    assert not path.exists()
    assert keyed.metrics.registry.get_sample_value("attachstore_check_mismatches_total") == 0
    _, data = await keyed.read(source)
    assert bytes(data) == other


def test_a_check_binds_the_ref_the_size_and_the_media_type() -> None:
    checker, image = Checker(bytes.fromhex(KEY)), png(20, 10, seed=13)
    ref = str(Ref.of("sha256", image))
    check = checker.of(ref, len(image), "image/png", image)
    assert check.startswith(f"v2:{checker.key_id}:")
    assert checker.holds(check, ref, len(image), "image/png", image)
    assert not checker.holds(check, "sha256:" + "0" * 64, len(image), "image/png", image)
    assert not checker.holds(check, ref, len(image) + 1, "image/png", image)
    assert not checker.holds(check, ref, len(image), "image/jpeg", image)
    assert not checker.holds(check, ref, len(image), "image/png", image + b"\0")
    assert not Checker(bytes.fromhex(OTHER)).mine(check)
    # The fields are framed by their lengths: moving a character from one to the other changes the check.
    assert checker.of(ref, 1, "ab", b"") != checker.of(ref + "a", 1, "b", b"")
    assert not checker.mine(unbound_check(KEY, image))  # schema 8's checks, of the bytes alone


async def test_the_audit_records_the_missing_checks(keyed: Store) -> None:
    images = [png(20, 10, seed=s) for s in (8, 9)]
    refs = [await put(keyed, i) for i in images]
    for ref in refs:
        set_check(keyed, ref, None)
    report = await Audit(keyed, settle=0).run()
    assert report.clean
    assert report.checks_recorded == 2
    for ref, image in zip(refs, images, strict=True):
        assert (await keyed.index.get(ref)).keyed_check == check_of(keyed.checker, image)  # type: ignore[union-attr]
    assert (await Audit(keyed, settle=0).run()).checks_recorded == 0


async def test_blake3_objects_verify_by_their_address(
    make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await Store.open(make_config(hash="blake3", integrity={"check_key": KEY}))
    try:
        image = png(20, 10, seed=10)
        ref = await put(store, image)
        assert ref.startswith("blake3:")
        assert (await store.index.get(ref)).keyed_check is None  # type: ignore[union-attr]
        hashes = Hashes(monkeypatch)
        _, data = await store.read(ref)
        assert bytes(data) == image
        assert (hashes.address, hashes.keyed) == (1, 0)
        assert (await store.index.get(ref)).keyed_check is None  # type: ignore[union-attr]
    finally:
        await store.close()


# -- where the key comes from ------------------------------------------------------------------------------


def with_key_file(config: Config, path: Path) -> Config:
    return msgspec.structs.replace(
        config, integrity=msgspec.structs.replace(config.integrity, check_key_file=str(path))
    )


def test_the_key_comes_from_the_config_or_the_environment(tmp_path: Path) -> None:
    env = {"ATTACHSTORE_DATA_DIR": str(tmp_path / "data"), "ATTACHSTORE_CHECK_KEY": KEY}
    assert checker(load(env=env), env).key_id == Checker(bytes.fromhex(KEY)).key_id


def test_the_key_comes_from_a_file_or_a_systemd_credential(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(OTHER + "\n")
    config = load(env={}, overrides={"data_dir": str(tmp_path / "data")})
    assert checker(with_key_file(config, tmp_path / "key"), {}).key_id == Checker(bytes.fromhex(OTHER)).key_id
    (tmp_path / "creds").mkdir()
    (tmp_path / "creds" / "check-key").write_text(KEY)
    env = {"CREDENTIALS_DIRECTORY": str(tmp_path / "creds"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    assert checker(config, env).key_id == Checker(bytes.fromhex(KEY)).key_id
    assert not (tmp_path / "cfg").exists()


def test_the_default_key_is_made_once_outside_the_data_dir(tmp_path: Path) -> None:
    config = load(env={}, overrides={"data_dir": str(tmp_path / "data")})
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    first = checker(config, env)
    path = default_key_file(env)
    assert path == tmp_path / "cfg" / "attachstore" / "check-key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert checker(config, env).key_id == first.key_id
    assert [p.name for p in path.parent.iterdir()] == ["check-key"]  # no staging file left


@pytest.mark.parametrize("where", ["config home", "key file"])
def test_a_key_inside_the_data_dir_is_refused(tmp_path: Path, where: str) -> None:
    data = tmp_path / "home"  # the service user's home is its data dir
    config = load(env={}, overrides={"data_dir": str(data)})
    if where == "key file":
        data.mkdir()
        (data / "key").write_text(KEY)
        config = with_key_file(config, data / "key")
    with pytest.raises(ConfigError, match="inside the data dir"):
        checker(config, {"HOME": str(data)})


def test_a_malformed_or_missing_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("not hex")
    config = load(env={}, overrides={"data_dir": str(tmp_path / "data")})
    with pytest.raises(ConfigError, match="64 lowercase hex"):
        checker(with_key_file(config, tmp_path / "key"), {})
    with pytest.raises(ConfigError, match="cannot read"):
        checker(with_key_file(config, tmp_path / "no"), {})
