import pytest

from attachstore.config import Route
from attachstore.errors import Rejected, RouteSwitchRejected
from attachstore.service.catalog import Catalog, Entry
from attachstore.service.policy import (
    Diagnostic,
    RouteTable,
    accepts_images,
    check_modality,
    check_switch,
    model_text,
)

TEXT, IMAGE = ["text"], ["text", "image"]
CATALOG = Catalog(
    "2026-01-01",
    [
        Entry(match="cat-v*", input_modalities=IMAGE, provider="anthropic", source="https://v"),
        Entry(id="cat-t", input_modalities=TEXT, provider="openai-chat", source="https://t"),
    ],
)
CONFIGURED = {"v": Route(input_modalities=IMAGE), "t": Route(input_modalities=TEXT), "d": Route()}
ROUTES = RouteTable(CONFIGURED, CATALOG)


def test_accepts_images() -> None:
    models = ("v", "t", "d", "x", None, "cat-v2", "cat-t")
    assert [accepts_images(ROUTES, r) for r in models] == [True, False, False, None, None, True, False]


def test_a_configured_route_replaces_the_catalog_entry_of_its_exact_id() -> None:
    routes = RouteTable({"cat-t": Route(input_modalities=IMAGE), "cat-v1": Route()}, CATALOG)
    t, v1, v2 = (routes.declaration(m) for m in ("cat-t", "cat-v1", "cat-v2"))
    assert t is not None
    assert (t.by, t.accepts_images, t.replaces) == ("config", True, "cat-t")
    assert v1 is not None
    assert (v1.by, v1.accepts_images, v1.replaces) == ("config", False, "cat-v*")
    assert v2 is not None
    assert (v2.by, v2.entry, v2.matched, v2.source) == (
        "catalog",
        "cat-v*",
        "cat-v2",
        "https://v",
    )
    # Exact ids only: another spelling of a configured id goes to the catalog.
    upper = routes.declaration("CAT-T")
    assert upper is not None
    assert (upper.by, upper.accepts_images) == ("catalog", False)


def test_an_entry_reached_through_a_hosts_path_names_no_provider() -> None:
    direct, hosted = ROUTES.declaration("cat-v2"), ROUTES.declaration("openrouter/cat-v2")
    assert direct is not None
    assert direct.route.provider == "anthropic"
    assert hosted is not None
    assert hosted.route.provider is None
    assert hosted.accepts_images


def test_the_listing_shows_each_declaration_and_its_origin() -> None:
    listed = [
        (d.entry, d.by, d.replaces) for d in RouteTable({"cat-t": Route(), "z": Route()}, CATALOG).listing()
    ]
    assert listed == [
        ("cat-t", "config", "cat-t"),
        ("z", "config", None),
        ("cat-t", "catalog", None),
        ("cat-v*", "catalog", None),
    ]


@pytest.mark.parametrize("source", ["user", "command"])
def test_uploads_are_refused_only_by_a_known_text_route(source: str) -> None:
    for route in ("v", "x", None, "cat-v9"):
        check_modality(ROUTES, route, source)
    for route in ("t", "d", "cat-t"):
        with pytest.raises(Rejected) as e:
            check_modality(ROUTES, route, source)
        assert e.value.code == "MODALITY_UNSUPPORTED"


def test_a_refusal_says_which_declaration_decided_and_how_to_change_it() -> None:
    with pytest.raises(Rejected) as configured:
        check_modality(ROUTES, "t", "user")
    assert 'declared by [routes."t"] in the configuration' in configured.value.message
    with pytest.raises(Rejected) as catalogued:
        check_modality(ROUTES, "cat-t", "user")
    assert "declared by the built-in catalog, entry 'cat-t'" in catalogued.value.message
    assert '[routes."cat-t"] with input_modalities = ["text", "image"]' in str(catalogued.value.hint)


@pytest.mark.parametrize("source", ["tool", "mcp"])
def test_tool_images_need_a_declared_vision_route(source: str) -> None:
    check_modality(ROUTES, "v", source)
    check_modality(ROUTES, "cat-v1", source)
    for route in ("t", "d", "x", None, "cat-t"):
        with pytest.raises(Rejected):
            check_modality(ROUTES, route, source)


def test_an_unknown_model_is_not_declared_which_is_not_blind() -> None:
    """The model reads this: it must not tell the user that it cannot see images when nobody said so."""
    with pytest.raises(Rejected) as e:
        check_modality(ROUTES, "my-llm", "tool")
    text = model_text([Diagnostic(0, "image/png", None, e.value.code, e.value.message, e.value.hint)])
    assert "'my-llm' is not declared as accepting images" in text
    assert "cannot see images" not in text
    assert '[routes."my-llm"] with input_modalities = ["text", "image"]' in text
    with pytest.raises(Rejected) as known:
        check_modality(ROUTES, "t", "tool")
    assert "cannot see images" in str(known.value.hint)


def test_switch_guard() -> None:
    check_switch(ROUTES, "s", 0, "t")
    check_switch(ROUTES, "s", 3, "v")
    check_switch(ROUTES, "s", 3, "unknown")
    check_switch(ROUTES, "s", 3, "cat-v1")
    for route in ("t", "cat-t"):
        with pytest.raises(RouteSwitchRejected):
            check_switch(ROUTES, "s", 1, route)


def test_one_reason_for_the_whole_batch_is_said_once() -> None:
    same = [
        Diagnostic(i, "image/png", None, "MODALITY_UNSUPPORTED", "the model 't' does not accept images")
        for i in range(3)
    ]
    text = model_text(same)
    assert text.startswith("The tool result contained 3 images, but none were attached: the model 't'")
    assert text.count("does not accept images") == 1


def test_each_image_is_explained() -> None:
    text = model_text(
        [
            Diagnostic(0, "image/png", "a.png", None, "valid"),
            Diagnostic(
                1,
                "image/png",
                "b.png",
                "IMAGE_TOO_LARGE",
                "the image is 9 bytes",
                "shrink it and read it again",
            ),
        ]
    )
    assert "Image 1 (a.png) was valid but was not attached" in text
    # A size rejection's hint already says the limit and the size: it stands alone.
    assert text.endswith("Image 2 (b.png): shrink it and read it again (IMAGE_TOO_LARGE).")
