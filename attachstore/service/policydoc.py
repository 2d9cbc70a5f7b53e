"""The store's policy as a document (the routes over the catalog, the [limits] and [admission] keys that
decide what is admitted), its fingerprint, and the keys by which two differ."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import msgspec

from ..config import Admission, Config, Limits
from ..errors import ConfigError
from ..index import PolicyRecord
from ..text import rfc3339
from .catalog import Catalog

log = logging.getLogger("attachstore.policy")

# [admission] keys that say how a process runs, not what it admits: not part of the policy.
_OPERATIONAL = frozenset(
    {
        "decode_workers",
        "decode_timeout",
        "request_decode_timeout",
        "max_concurrent",
        "max_concurrent_per_tenant",
        "max_buffered_bytes",
        "max_derivations_per_tenant",
    }
)
_SHOWN = 8  # differences named in a message; the rest are counted


class PolicyMismatch(ConfigError): ...


def document(config: Config, catalog: Catalog) -> dict[str, Any]:
    return {
        "catalog": catalog.document(),
        "routes": {k: msgspec.to_builtins(config.routes[k]) for k in sorted(config.routes)},
        "limits": msgspec.to_builtins(config.limits),
        "admission": _admission_keys(config.admission),
    }


def _admission_keys(admission: Admission) -> dict[str, Any]:
    return {k: v for k, v in msgspec.to_builtins(admission).items() if k not in _OPERATIONAL}


def encode(doc: dict[str, Any]) -> str:
    return msgspec.json.encode(doc, order="sorted").decode()


def fingerprint(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def declares_policy(config: Config) -> bool:
    return (
        bool(config.routes)
        or config.limits != Limits()
        or _admission_keys(config.admission) != _admission_keys(Admission())
    )


# -- what differs -------------------------------------------------------------------------------------------


def differences(theirs: dict[str, Any], ours: dict[str, Any], there: str) -> list[str]:
    found: list[str] = []
    t_routes, o_routes = theirs.get("routes") or {}, ours.get("routes") or {}
    for rid in sorted(set(t_routes) | set(o_routes)):
        key = f"routes.{json.dumps(rid)}"
        if rid not in o_routes:
            found.append(f"{key}: declared {there}, not here")
        elif rid not in t_routes:
            found.append(f"{key}: declared here, not {there}")
        else:
            found += _values(key, t_routes[rid], o_routes[rid], there)
    for section in ("limits", "admission"):
        found += _values(section, theirs.get(section) or {}, ours.get(section) or {}, there)
    t_cat, o_cat = theirs.get("catalog") or {}, ours.get("catalog") or {}
    if t_cat != o_cat:
        found.append(f"catalog: {_catalog_change(t_cat, o_cat, there)}")
    return found


def _values(key: str, theirs: object, ours: object, there: str) -> list[str]:
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return [
            line
            for k in sorted(set(theirs) | set(ours))
            for line in _values(f"{key}.{k}", theirs.get(k), ours.get(k), there)
        ]
    if theirs == ours:
        return []
    return [f"{key}: {_shown(theirs)} {there}, {_shown(ours)} here"]


def _shown(value: object) -> str:
    return "not set" if value is None else msgspec.json.encode(value).decode()


def _catalog_change(theirs: dict[str, Any], ours: dict[str, Any], there: str) -> str:
    def entries(doc: dict[str, Any]) -> dict[str, object]:
        return {str(e.get("id") or e.get("match")): e for e in doc.get("models") or [] if isinstance(e, dict)}

    t, o = entries(theirs), entries(ours)
    changed = sorted(k for k in set(t) | set(o) if t.get(k) != o.get(k))
    named = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    versions = f"version {theirs.get('version')} {there}, {ours.get('version')} here"
    return f"{versions} ({len(changed)} entries differ: {named})" if changed else versions


def describe(found: Sequence[str]) -> str:
    shown = "; ".join(found[:_SHOWN])
    return shown + (f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")


def who(record: PolicyRecord) -> str:
    return f"the daemon {record.recorded_by} at {rfc3339(record.recorded_at, 'seconds')}"
