"""The OpenAPI description covers every route, and a schemathesis run against a live daemon finds no 5xx
and no answer that does not match the description."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from attachstore.api import make_app
from attachstore.api.openapi import document
from attachstore.api.ui import under_ui
from tests.support.daemon import serving

ROUTES = '[routes."vision"]\ninput_modalities = ["text", "image"]\nprovider = "openai-chat"\n'


def test_every_route_is_described(tmp_path: Path) -> None:
    import msgspec

    from attachstore.config import Config

    app = make_app(msgspec.convert({"data_dir": str(tmp_path)}, Config))
    served = {
        (r.method.lower(), r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None and r.method != "HEAD" and not under_ui(r.resource.canonical)
    }  # the operator page (docs/ui.md) is HTML for a browser, not the API
    described = {
        (method, path.replace("{ref}", "{ref:[^/]+}") if path.endswith("/meta") else path)
        for path, item in document()["paths"].items()
        for method in item
        if method in ("get", "post", "put", "delete")
    }
    normalized = {(m, p.replace("{ref:[^/]+}", "{ref}").replace("{ref:.+}", "{ref}")) for m, p in served}
    assert normalized == {(m, p.replace("{ref:[^/]+}", "{ref}")) for m, p in described}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("openapi"), ROUTES) as url:
        yield url


schema = schemathesis.openapi.from_dict(document())


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_5xx_and_every_answer_matches_the_description(case: schemathesis.Case, daemon: str) -> None:
    response = case.call(base_url=daemon, timeout=30)
    assert response.status_code not in (500, 501, 502, 504), response.text
    if response.status_code == 503:
        assert response.json()["error"]["code"] in ("STORAGE_UNAVAILABLE", "SERVER_BUSY")
    case.validate_response(
        response,
        checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
    )
