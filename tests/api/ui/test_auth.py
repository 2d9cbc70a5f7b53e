"""Who sees the operator page: the login form, its cookie, and the open-mode rule, through the real app."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from attachstore.api.ui import auth
from attachstore.api.ui.views import CSP
from tests.conftest import MakeClient
from tests.support.http import Client

TOKENS = {"alpha": "alpha-token-0123456789", "beta": "beta-token-0123456789"}
TENANTS = [{"name": n, "token_sha256": hashlib.sha256(t.encode()).hexdigest()} for n, t in TOKENS.items()]


async def login(client: Client, token: str, **headers: str) -> Any:
    return await client.post(
        "/ui/login",
        data={"token": token},
        headers=headers,
        allow_redirects=False,
    )


@pytest.fixture
async def tenants(make_client: MakeClient) -> Client:
    return await make_client(tenants=TENANTS)


async def test_without_the_cookie_a_page_sends_the_browser_to_the_login_form(tenants: Client) -> None:
    answer = await tenants.get("/ui/", allow_redirects=False)
    assert answer.status == 303
    assert answer.headers["Location"] == "/ui/login"
    form = await tenants.get("/ui/login")
    assert form.status == 200
    assert form.headers["Content-Security-Policy"] == CSP
    assert '<form method="post" action="/ui/login"' in await form.text()


async def test_the_login_sets_the_cookie_as_specified_and_opens_the_pages(tenants: Client) -> None:
    answer = await login(tenants, TOKENS["alpha"])
    assert answer.status == 303
    assert answer.headers["Location"] == "/ui/"
    cookie = answer.headers["Set-Cookie"]
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == f"{auth.COOKIE}={TOKENS['alpha']}"
    assert {p.lower() for p in parts[1:]} == {"httponly", "path=/ui", "samesite=strict"}  # no Secure on http
    page = await tenants.get("/ui/")
    assert page.status == 200
    assert "Log out" in await page.text()


async def test_behind_tls_the_cookie_is_secure(tenants: Client) -> None:
    answer = await login(tenants, TOKENS["alpha"], **{"X-Forwarded-Proto": "https"})
    assert "secure" in {p.strip().lower() for p in answer.headers["Set-Cookie"].split(";")}


async def test_a_wrong_token_is_refused_and_sets_no_cookie(tenants: Client) -> None:
    answer = await login(tenants, "not-a-token")
    assert answer.status == 401
    assert "Set-Cookie" not in answer.headers
    assert "That token is not one the daemon knows." in await answer.text()
    assert (await tenants.get("/ui/", allow_redirects=False)).status == 303


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://elsewhere.example"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "null"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
async def test_a_login_sent_from_another_site_is_refused(tenants: Client, headers: dict[str, str]) -> None:
    answer = await login(tenants, TOKENS["alpha"], **headers)
    assert answer.status == 403
    assert "Set-Cookie" not in answer.headers


async def test_a_cookie_whose_token_is_no_longer_configured_is_a_login_again(tenants: Client) -> None:
    tenants.session.cookie_jar.update_cookies({auth.COOKIE: "revoked-token"})
    assert (await tenants.get("/ui/", allow_redirects=False)).status == 303


async def test_logging_out_forgets_the_cookie(tenants: Client) -> None:
    await login(tenants, TOKENS["alpha"])
    answer = await tenants.post("/ui/logout", allow_redirects=False)
    assert answer.status == 303
    assert answer.headers["Location"] == "/ui/login"
    assert (await tenants.get("/ui/", allow_redirects=False)).status == 303


async def test_the_bearer_header_does_not_open_the_pages(tenants: Client) -> None:
    # The page's own rule: a cookie that only its paths receive, set by its form.
    headers = {"Authorization": f"Bearer {TOKENS['alpha']}"}
    assert (await tenants.get("/ui/", headers=headers, allow_redirects=False)).status == 303


async def test_a_preview_without_the_cookie_is_unauthorized(tenants: Client) -> None:
    answer = await tenants.get(f"/ui/attachments/sha256:{'a' * 64}/preview?size=128")
    assert answer.status == 401
    assert (await answer.json())["error"]["code"] == "UNAUTHORIZED"


async def test_in_open_mode_the_page_is_open_to_loopback_clients(client: Client) -> None:
    page = await client.get("/ui/")
    assert page.status == 200
    assert page.headers["Content-Security-Policy"] == CSP
    assert "Log out" not in await page.text()
    assert (await client.get("/ui/login", allow_redirects=False)).headers["Location"] == "/ui/"


@pytest.mark.parametrize(
    "headers",
    [{"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}, {"Host": "attacker.example"}],
)
async def test_in_open_mode_a_forwarded_or_rebound_request_is_refused(
    client: Client, headers: dict[str, str]
) -> None:
    page = await client.get("/ui/", headers=headers)
    assert page.status == 403
    assert "served to clients on this machine only" in await page.text()
    preview = await client.get(f"/ui/attachments/sha256:{'a' * 64}/preview?size=128", headers=headers)
    assert preview.status == 403


def request(remote: str, host: str, **headers: str) -> web.Request:
    return make_mocked_request("GET", "/ui/", headers={"Host": host, **headers}, transport=_Peer(remote))


class _Peer:
    def __init__(self, remote: str) -> None:
        self.remote = remote

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.remote, 1234) if name == "peername" and self.remote else default


@pytest.mark.parametrize(
    ("remote", "host", "local"),
    [
        ("127.0.0.1", "127.0.0.1:8731", True),
        ("127.0.0.5", "localhost:8731", True),
        ("::1", "[::1]:8731", True),
        ("", "localhost", True),  # a Unix socket's peer has no address
        ("192.0.2.7", "127.0.0.1:8731", False),
        ("127.0.0.1", "store.example:8731", False),
        ("127.0.0.1", "192.0.2.1:8731", False),
    ],
)
def test_local_means_a_loopback_peer_reaching_a_loopback_name(remote: str, host: str, local: bool) -> None:
    assert auth.local(request(remote, host)) is local
