"""A crash at any step of strip --in-place leaves the original, or a complete stripped file that restores to
it exactly; and the next run works."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from attachstore.service import Store
from attachstore.transcripts import Options, Restorer, Stripper, restore_file
from tests.conftest import MakeConfig
from tests.transcripts import fixtures

# Whether the file has been replaced when the process dies at each step.
REPLACED = {
    "reading": False,
    "created": False,
    "written": False,
    "held": False,
    "synced": False,
    "verified": False,
    "checked": False,
    "renamed": True,
    "dir_synced": True,
}


def transcript() -> bytes:
    """A rollout of more than one read chunk (1 MiB), so that the process also dies halfway through."""
    return fixtures.codex().text * 60


@pytest.mark.parametrize("step", list(REPLACED))
async def test_sigkill_at_each_step_leaves_a_file_that_restores_exactly(
    step: str, tmp_path: Path, make_config: MakeConfig
) -> None:
    source = tmp_path / "sessions" / "rollout-2026-08-20T10-00-00-a.jsonl"
    source.parent.mkdir()
    original = transcript()
    source.write_bytes(original)
    child = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "tests.support.transcript_crash_child",
            str(tmp_path / "data"),
            str(source),
            step,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, (child.stdout, child.stderr)  # it died at the step, by SIGKILL

    left = source.read_bytes()
    assert (left != original) == REPLACED[step]
    names = sorted(p.name for p in source.parent.iterdir())
    leftovers = [n for n in names if n != source.name]
    # At most the temporary file the process was writing, hidden and named so that no host reads it.
    assert len(leftovers) <= 1
    assert all(n.startswith(f".{source.name}.attachstore-") and n.endswith(".tmp") for n in leftovers)

    store = await Store.open(make_config())
    try:
        back = tmp_path / "back.jsonl"
        report = await restore_file(Restorer(store), source, back)
        assert report.status == ("restored" if REPLACED[step] else "unchanged")
        assert back.read_bytes() == original
        # The next run works, whatever the crash left.
        stripper = Stripper(store, Options())
        again = await stripper.strip(source, source)
        await stripper.close()
        assert again.status == ("unchanged" if REPLACED[step] else "stripped")
        await restore_file(Restorer(store), source, back)
        assert back.read_bytes() == original
    finally:
        await store.close()
