"""The description /openapi.json serves, pinned byte for byte: a change to it is a change to the API that
clients generate from, made on purpose (update the hash with the change, and say it in docs/changelog.md)."""

from __future__ import annotations

import hashlib

import msgspec

from attachstore.api.openapi import document

PINNED = "3e5917de3a6191927d02232d57c5bec7ba2c04d592382f476937a75a6d6e8231"


def test_the_document_changes_only_on_purpose() -> None:
    doc = document()
    doc["info"]["version"] = "0"  # a release changes the version and nothing else
    encoded = msgspec.json.encode(doc)
    assert hashlib.sha256(encoded).hexdigest() == PINNED
