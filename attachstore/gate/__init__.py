"""The admission gate: the checks of SPEC section 4, pure functions of the bytes, and the pool of decode
worker processes that runs the expensive ones (docs/design.md, "The gate"). The face holds what the other
packages use."""

from .base64text import base64_decoded_size, decode_base64_shared
from .batch import AlreadyDecided, Batch
from .checks import ATTACH_AGAIN, READ_AGAIN, canonical_type, check_batch, precheck
from .containers import HeaderTooDeep
from .pool import DecodePool
from .probe import MEDIA_TYPES, Header, probe_header, sniff
from .shared import SharedBuffer
from .sources import NAMES as _SOURCE_NAMES
from .sources import sniff as sniff_source
from .worker import Original, Passed

SOURCE_TYPES = tuple(_SOURCE_NAMES)  # taken in and converted, never stored (docs/normalization.md, "Sources")

__all__ = [
    "ATTACH_AGAIN",
    "MEDIA_TYPES",
    "READ_AGAIN",
    "SOURCE_TYPES",
    "AlreadyDecided",
    "Batch",
    "DecodePool",
    "Header",
    "HeaderTooDeep",
    "Original",
    "Passed",
    "SharedBuffer",
    "base64_decoded_size",
    "canonical_type",
    "check_batch",
    "decode_base64_shared",
    "precheck",
    "probe_header",
    "sniff",
    "sniff_source",
]
