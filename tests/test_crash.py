"""Crash consistency: SIGKILL at each named step of the write path, restart, check the invariants."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attachstore.maintenance import Audit, Kind, gc
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from tests.conftest import MakeConfig
from tests.support.images import png

# What each kill leaves of the interrupted admission: (staging files, unindexed object files, published).
LEFT = {
    "staged": (1, 0, False),
    "synced": (1, 0, False),
    "linked": (1, 1, False),
    "dir_synced": (1, 1, False),
    "committed": (0, 0, True),
    "answered": (0, 0, True),
}
STEPS = list(LEFT)
COUNT = 3


@pytest.mark.parametrize("step", STEPS)
async def test_sigkill_at_each_step_keeps_every_promise(
    step: str, tmp_path: Path, make_config: MakeConfig
) -> None:
    data_dir = tmp_path / "data"
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.support.crash_child", str(data_dir), step, str(COUNT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr  # it died by SIGKILL, mid-admission
    answered = child.stdout.split()
    assert answered == [str(Ref.of("sha256", png(20, 10, seed=i))) for i in range(COUNT - 1)]

    store = await Store.open(make_config())
    try:
        # Every ref answered before the kill reads back verified.
        for ref in answered:
            _, data = await store.read(ref)
            assert Ref.parse(ref).matches(data)
        # No row without its file, no file with wrong bytes; at most an unindexed file (killed after the
        # link, before the commit) and a staging file are left behind.
        report = await Audit(store, settle=0).run()
        assert [f.kind for f in report.findings if f.kind != Kind.STRAY_FILE] == []
        for finding in report.findings:
            assert finding.detail.endswith("its bytes verify")
        staging, unindexed, published = LEFT[step]
        assert (len(list(store.local.walk_staging())), len(report.findings)) == (staging, unindexed)
        interrupted = str(Ref.of("sha256", png(20, 10, seed=COUNT - 1)))
        assert (await store.index.get(interrupted) is not None) == published
        # The next gc cleans the leftovers up (the answered refs are named by a root, as a host's log would).
        roots = tmp_path / "session.log"
        roots.write_text("\n".join(answered))
        # Files without a row are left alone while they may be in flight; look an hour later.
        later = time.time() + 3600
        await gc.execute(store, await gc.plan(store, grace=0, roots=[roots], now=later))
        assert list(store.local.walk_staging()) == []
        assert (await Audit(store, settle=0).run()).findings == []
        for ref in answered:
            await store.read(ref)
        # Whatever the crash left, admitting the interrupted image again works.
        last = png(20, 10, seed=COUNT - 1)
        result = await store.admit([Upload.of_bytes(last)], "user")
        _, data = await store.read(result.attachments[0].ref)
        assert data == last
    finally:
        await store.close()
