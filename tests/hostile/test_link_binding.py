"""Someone who can write the data dir and the index but does not hold the check key points a victim source's
variant link (a preview, or the request variant a render sends on a route with `max_request_side`) at
another stored object: mallory's image, which verifies as itself wherever it is read. Followed, the link
would send mallory's bytes in place of the victim's preview or variant, and no check of the objects would
notice. Each link carries a keyed check of its source, spec and variant, so a link repointed with its own
check kept, or with the check of another source's link copied along, is not followed: the variant is
derived again from the victim's own bytes (and linked with a fresh check), the refusal is counted in
`attachstore_variant_links_refused_total{reason="mismatch"}`, and mallory's bytes are never answered."""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.http import object_path
from tests.support.images import png

ROUTES = {
    'routes."small"': {
        "input_modalities": ["text", "image"],
        "provider": "openai-chat",
        "max_request_side": 64,
    }
}


def _sent(daemon: Any, tenant: str, how: str, ref: str, **headers: str) -> tuple[int, bytes]:
    """What `tenant` is sent as `ref`'s preview (its bytes) or in a render on the small route (its body)."""
    if how == "preview":
        return daemon.ask(tenant, "GET", f"/v1/attachments/{ref}/preview?size=64", **headers)
    message = {"role": "user", "content": [{"type": "image", "ref": ref}]}
    body = json.dumps({"route": "small", "messages": [message]}).encode()
    return daemon.ask(tenant, "POST", "/v1/render", body)


@contextlib.contextmanager
def _index(daemon: Any) -> Iterator[sqlite3.Connection]:
    """The daemon's index, written in one transaction, and closed."""
    db = sqlite3.connect(daemon.data_dir / "index.sqlite3", timeout=60)
    try:
        with db:
            yield db
    finally:
        db.close()


def _link(db: sqlite3.Connection, source: str) -> tuple[str, str]:
    """The one link of `source`: its spec and its variant."""
    [(spec, variant)] = db.execute(
        "SELECT spec, variant FROM variants WHERE source = ?", (source,)
    ).fetchall()
    return spec, variant


def _plant(daemon: Any, victim: str, other: str, mallorys_source: str, how: str) -> str:
    """Point the victim's link at another object; returns that object's ref. `repointed`: at mallory's
    image, the victim link's own check kept. `copied`: at the variant of mallory's source, with the check of
    mallory's own link (where links have checks)."""
    with _index(daemon) as db:
        spec, _ = _link(db, victim)
        checked = "link_check" in {r[1] for r in db.execute("PRAGMA table_info(variants)")}
        if how == "repointed":
            target = other
            db.execute("UPDATE variants SET variant = ? WHERE source = ?", (target, victim))
        else:
            mallorys_spec, target = _link(db, mallorys_source)
            assert mallorys_spec == spec
            if checked:
                [(check,)] = db.execute(
                    "SELECT link_check FROM variants WHERE source = ?", (mallorys_source,)
                )
                assert check is not None, "mallory's link has no check to copy"
                db.execute(
                    "UPDATE variants SET variant = ?, link_check = ? WHERE source = ?",
                    (target, check, victim),
                )
            else:
                db.execute("UPDATE variants SET variant = ? WHERE source = ?", (target, victim))
    return target


@pytest.mark.parametrize("plant", ["repointed", "copied"])
@pytest.mark.parametrize("how", ["preview", "render"])
def test_a_planted_variant_link_is_not_followed(start_daemon: Any, how: str, plant: str) -> None:
    daemon = start_daemon(**ROUTES)
    victim = daemon.admit("alice", png(300, 200))
    other_image = png(48, 32, seed=7)  # within both limits: it would be sent as it is
    other = daemon.admit("mallory", other_image)
    mallorys_source = daemon.admit("mallory", png(320, 240, seed=8))

    status, first = _sent(daemon, "alice", how, victim)  # derives the victim's variant, and links it
    assert status == 200, first[:200]
    assert _sent(daemon, "mallory", how, mallorys_source)[0] == 200
    with _index(daemon) as db:
        _, derived = _link(db, victim)
    target = _plant(daemon, victim, other, mallorys_source, plant)
    planted = object_path(daemon.data_dir, target).read_bytes()
    assert planted not in first
    assert base64.b64encode(planted) not in first
    derivations = daemon.metric("attachstore_variants_total", result="derived")

    answers = []
    if how == "preview":  # a conditional GET naming the planted object is not told "not modified" either
        answers.append(_sent(daemon, "alice", how, victim, **{"If-None-Match": f'"{target}"'}))
    answers.append(_sent(daemon, "alice", how, victim))

    # (status, whether the planted object's bytes, or their base64, were sent) of each answer
    sent = [(status, planted in got or base64.b64encode(planted) in got) for status, got in answers]
    assert sent == [(200, False)] * len(answers)
    assert [got for _, got in answers] == [first] * len(answers)  # derived again from the victim's bytes
    assert daemon.metric("attachstore_variants_total", result="derived") == derivations + 1
    assert daemon.metric("attachstore_variant_links_refused_total", reason="mismatch") == 1
    with _index(daemon) as db:
        assert _link(db, victim)[1] == derived  # linked again, to the victim's own variant
    # Followed from now on: the fresh link's check holds.
    assert _sent(daemon, "alice", how, victim) == (200, first)
    assert daemon.metric("attachstore_variants_total", result="derived") == derivations + 1
    daemon.assert_alice_is_served()
