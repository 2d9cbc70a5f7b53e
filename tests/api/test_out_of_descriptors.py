"""Out of descriptors (EMFILE in the process, ENFILE in the system) is a moment's trouble: `503 SERVER_BUSY`,
logged without a traceback, never `500 INTERNAL`."""

from __future__ import annotations

import base64
import errno
import logging
from typing import Any, NoReturn

import pytest

from attachstore.api import common
from attachstore.gate import shared
from tests.support.images import png

MakeClient = Any


def _out(*args: object, **kwargs: object) -> NoReturn:
    raise OSError(errno.EMFILE, "Too many open files")


@pytest.mark.parametrize("where", ["memfd", "elsewhere"])
async def test_out_of_descriptors_is_busy(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    client = await make_client()
    monkeypatch.setattr(shared, "DESCRIPTORS", shared.Descriptors(limit=1000))
    if where == "memfd":  # an upload's bytes get no memory file
        monkeypatch.setattr(shared.os, "memfd_create", _out)
    else:  # any other descriptor a request needs
        monkeypatch.setattr(common, "read_capped", _out)
    body = {"source": "user", "images": [{"data": base64.b64encode(png(8, 8)).decode()}]}
    with caplog.at_level(logging.INFO):
        answer = await client.post("/v1/attachments", json=body)
        assert answer.status == 503, await answer.text()
        assert answer.headers["Retry-After"] == "1"
        assert (await answer.json())["error"]["code"] == "SERVER_BUSY"
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert shared.DESCRIPTORS.held == 0
