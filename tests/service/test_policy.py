import pytest

from attachstore.config import Route
from attachstore.errors import Rejected, RouteSwitchRejected
from attachstore.service.policy import Diagnostic, accepts_images, check_modality, check_switch, model_text

ROUTES = {"v": Route(input_modalities=["text", "image"]), "t": Route(input_modalities=["text"]), "d": Route()}


def test_accepts_images() -> None:
    assert [accepts_images(ROUTES, r) for r in ("v", "t", "d", "x", None)] == [True, False, False, None, None]


@pytest.mark.parametrize("source", ["user", "command"])
def test_uploads_are_refused_only_by_a_known_text_route(source: str) -> None:
    for route in ("v", "x", None):
        check_modality(ROUTES, route, source)
    for route in ("t", "d"):
        with pytest.raises(Rejected) as e:
            check_modality(ROUTES, route, source)
        assert e.value.code == "MODALITY_UNSUPPORTED"


@pytest.mark.parametrize("source", ["tool", "mcp"])
def test_tool_images_need_a_declared_vision_route(source: str) -> None:
    check_modality(ROUTES, "v", source)
    for route in ("t", "d", "x", None):
        with pytest.raises(Rejected):
            check_modality(ROUTES, route, source)


def test_switch_guard() -> None:
    check_switch(ROUTES, "s", 0, "t")
    check_switch(ROUTES, "s", 3, "v")
    check_switch(ROUTES, "s", 3, "unknown")
    with pytest.raises(RouteSwitchRejected):
        check_switch(ROUTES, "s", 1, "t")


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
