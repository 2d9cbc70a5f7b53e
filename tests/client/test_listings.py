"""The listing calls of both clients (attachstore/client/listings.py): pages, iteration across pages, the
totals; the AsyncClient against the real app, the blocking Client against a real daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from attachstore.client import AsyncClient, AttachstoreClientError, Client, Image
from tests.client.test_client import _config
from tests.conftest import MakeClient
from tests.support.daemon import Daemons
from tests.support.images import png


@pytest.fixture
async def ac(make_client: MakeClient) -> AsyncIterator[AsyncClient]:
    server = await make_client()
    async with AsyncClient(str(server.make_url(""))) as c:
        yield c


async def test_sessions_their_attachments_and_stats(ac: AsyncClient) -> None:
    for i in range(5):
        await ac.create_session(f"s{i}")
    refs = (await ac.admit([png(4, 4, seed=s) for s in range(3)], source="user", session="s4")).refs
    page = await ac.sessions_page(limit=2)
    assert [s.id for s in page.sessions] == ["s4", "s3"]
    assert (page.sessions[0].images, page.sessions[0].expires) == (3, None)
    assert [s.id async for s in ac.list_sessions(page_size=2)] == ["s4", "s3", "s2", "s1", "s0"]
    assert [s.id async for s in ac.list_sessions(prefix="s1")] == ["s1"]
    assert [s.id async for s in ac.list_sessions(expired=True)] == []
    held = [h.attachment.ref async for h in ac.session_attachments("s4", page_size=1)]
    assert sorted(held) == sorted(refs)
    stats = await ac.stats()
    assert (stats.tenant, stats.objects, stats.sessions) == (None, 3, 5)
    assert stats.by_type["image/png"].objects == 3
    with pytest.raises(AttachstoreClientError) as caught:
        await ac.attachments_page("nope")
    assert caught.value.code == "SESSION_NOT_FOUND"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with Daemons(tmp_path_factory.mktemp("daemon")) as daemons:
        started = daemons.start(*daemons.store(_config()))
        yield started.url
        started.stop_cleanly()


def test_the_blocking_client_lists_and_counts(daemon: str) -> None:
    with Client(daemon) as c:
        c.create_session("a")
        c.create_session("b")
        [ref] = c.admit(Image(png(6, 6), "image/png"), source="user", session="a").refs
        assert [s.id for s in c.list_sessions(page_size=1)] == ["a", "b"]  # the admission used "a" last
        assert c.sessions_page(prefix="a").sessions[0].bytes > 0
        assert [h.attachment.ref for h in c.session_attachments("a")] == [ref]
        assert c.attachments_page("a").next is None
        assert c.stats().objects == 1
