"""The description /openapi.json serves, pinned byte for byte: a change to it is a change to the API that
clients generate from, made on purpose (update the hash with the change, and say it in docs/changelog.md)."""

from __future__ import annotations

import hashlib

import msgspec

from attachstore.api.openapi import document

PINNED = "a2323bf4167923390a1cae58948479506bc6ee46469fffdcf7d36f541dcd2d13"


def test_the_document_changes_only_on_purpose() -> None:
    doc = document()
    doc["info"]["version"] = "0"  # a release changes the version and nothing else
    encoded = msgspec.json.encode(doc)
    assert hashlib.sha256(encoded).hexdigest() == PINNED
