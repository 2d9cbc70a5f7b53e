"""Spoofed display names: mallory names an image so that a host showing the name shows something else
(`evil\u202egnp.exe` is shown as "evilexe.png"). The name is kept without the characters that reorder or
hide what is shown, on the JSON and the multipart path alike, and alice is still served."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

from attachstore.client import Client, Image
from tests.hostile.conftest import TOKENS
from tests.support.images import png

SPOOFED = "report\u202efdp.exe\u2066\u200b\u00ad\u3164"  # RLO, an isolate, a zero width space, a filler


def _post(url: str, body: Any, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(
        f"{url}/v1/attachments",
        json.dumps(body).encode(),
        {**headers, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 201
        return json.load(answer)


def test_names_lose_what_would_reorder_or_hide_them(start_daemon: Any) -> None:
    daemon = start_daemon(limits={"max_image_bytes": 200_000})
    body = {"source": "user", "images": [{"data": base64.b64encode(png(8, 8)).decode(), "name": SPOOFED}]}
    [via_json] = _post(daemon.url, body, daemon.headers("mallory"))["attachments"]
    assert via_json["name"] == "reportfdp.exe"
    with Client(daemon.url, token=TOKENS["mallory"]) as mallory:
        # The client sends the name as UTF-8 in the part's filename, as it is.
        [via_form] = mallory.admit(Image(png(9, 9), name=f"dir/{SPOOFED}"), source="user").attachments
        assert via_form.name == "reportfdp.exe"
        assert mallory.meta(via_json["ref"]).name == "reportfdp.exe"
        assert mallory.meta(via_form.ref).name == "reportfdp.exe"
    with Client(daemon.url, token=TOKENS["alice"]) as alice:
        image = png(10, 10)
        [mine] = alice.admit(Image(image, name="holiday.png"), source="user").attachments
        assert (mine.name, alice.read(mine.ref)) == ("holiday.png", image)
    assert daemon.peak_rss() < 300 << 20
