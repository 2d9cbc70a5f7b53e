"""Exact admissions (`Store.admit(..., exact=True)`, what `attachstore transcript strip` uses) and dry-run
checks (`Store.check`): the bytes are stored as they came whatever [admission] says, or refused."""

from __future__ import annotations

import pytest
from PIL import Image

from attachstore.errors import Rejected
from attachstore.refs import Ref
from attachstore.service import Store, Upload
from tests.conftest import MakeConfig
from tests.support import images

GPS_IFD = 0x8825
NORMALIZING = {"admission": {"oversize": "fit", "strip_metadata": True, "decode_workers": 1}}


def jpeg_with_gps(width: int, height: int) -> bytes:
    exif = Image.Exif()
    exif.get_ifd(GPS_IFD).update({1: "N", 2: (52.0, 31.0, 12.0)})
    return images.encode(images.noise(width, height), "JPEG", quality=80, exif=exif.tobytes())


async def test_exact_keeps_metadata_that_strip_metadata_would_remove(make_config: MakeConfig) -> None:
    store = await Store.open(make_config(**NORMALIZING))
    try:
        original = jpeg_with_gps(64, 48)
        normalized = await store.admit([Upload.of_bytes(original)], "user")
        assert normalized.attachments[0].normalized is not None  # the configuration does change it
        result = await store.admit([Upload.of_bytes(original)], "user", exact=True)
        [a] = result.attachments
        assert a.normalized is None
        assert a.ref == str(Ref.of("sha256", original))
        assert (await store.read(a.ref))[1] == original
    finally:
        await store.close()


async def test_exact_refuses_what_fit_would_normalize(make_config: MakeConfig) -> None:
    store = await Store.open(make_config(**NORMALIZING, limits={"max_side": 100}))
    try:
        wide = images.png(160, 20)
        fitted = await store.admit([Upload.of_bytes(wide)], "user")
        assert fitted.attachments[0].width == 100
        with pytest.raises(Rejected) as e:
            await store.admit([Upload.of_bytes(wide)], "user", exact=True)
        assert e.value.code == "IMAGE_DIMENSION_TOO_LARGE"
    finally:
        await store.close()


async def test_check_gives_each_verdict_and_stores_nothing(make_config: MakeConfig) -> None:
    store = await Store.open(make_config(**NORMALIZING, limits={"max_side": 100}))
    try:
        good, wide = images.png(10, 10), images.png(160, 20)
        verdicts = await store.check(
            [Upload.of_bytes(good), Upload.of_bytes(wide), Upload.of_bytes(b"not an image at all")],
            "user",
            exact=True,
        )
        assert [None if v is None else v.code for v in verdicts] == [
            None,
            "IMAGE_DIMENSION_TOO_LARGE",
            "UNSUPPORTED_IMAGE_TYPE",
        ]
        assert await store.index.get(str(Ref.of("sha256", good))) is None
        # Without exact, fit would take the wide one.
        assert await store.check([Upload.of_bytes(wide)], "user") == [None]
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (images.bmp(), "BMP"),
        (images.tiff(), "TIFF"),
        (images.encode(images.noise(8, 8), "AVIF"), "AVIF"),
    ],
)
async def test_exact_refuses_a_source_that_could_be_stored_only_converted(
    make_config: MakeConfig, data: bytes, named: str
) -> None:
    store = await Store.open(make_config(**NORMALIZING))
    try:
        converted = await store.admit([Upload.of_bytes(data)], "user")
        assert converted.attachments[0].normalized is not None
        with pytest.raises(Rejected) as e:
            await store.admit([Upload.of_bytes(data)], "user", exact=True)
        assert e.value.code == "UNSUPPORTED_IMAGE_TYPE"
        assert e.value.message == (
            f"the image is {named}, which can be stored only converted to PNG or JPEG, and this admission "
            "stores every image exactly as it came"
        )
        [verdict] = await store.check([Upload.of_bytes(data)], "user", exact=True)
        assert verdict is not None
        assert verdict.code == "UNSUPPORTED_IMAGE_TYPE"
    finally:
        await store.close()
