"""Out of descriptors while the store opens a file (a duplicate's existing object verified, an object read,
a staging file made): found by a real daemon at a low RLIMIT_NOFILE under many-part admissions, where an
admission answered `503 STORAGE_UNAVAILABLE` "storage I/O error while verifying an existing object: Too many
open files". The storage is fine; the process is short of descriptors for a moment, which is
`SERVER_BUSY` everywhere else (docs/security.md, the descriptors' bound). Every storage error of the local
backend goes through `storage_error`, so it is held to that here, for each way of running short."""

from __future__ import annotations

import errno
import os

import pytest

from attachstore.storage.fileops import storage_error


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE], ids=["EMFILE", "ENFILE"])
def test_out_of_descriptors_in_the_store_is_server_busy_not_storage_unavailable(code: int) -> None:
    e = storage_error(OSError(code, os.strerror(code)), "verifying an existing object")
    assert (e.status, e.code) == (503, "SERVER_BUSY"), (e.status, e.code, e.message)
    assert "descriptor" in e.message, e.message


def test_other_io_errors_stay_storage_unavailable() -> None:
    e = storage_error(OSError(errno.EIO, os.strerror(errno.EIO)), "reading an object")
    assert (e.status, e.code) == (503, "STORAGE_UNAVAILABLE")
