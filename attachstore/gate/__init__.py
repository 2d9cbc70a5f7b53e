"""The admission gate: the checks of SPEC section 4, the container walks and header probe they use, the
lossless metadata surgery and the normalization of oversized images, and the pool of decode worker processes
that runs the expensive part. Pure functions of the bytes, except the pool."""

from .base64text import base64_decoded_size, decode_base64, decode_base64_shared
from .batch import Batch, Unwanted
from .checks import (
    ATTACH_AGAIN,
    READ_AGAIN,
    TRAILING_DATA,
    Inspection,
    canonical_type,
    check_batch,
    inspect,
    precheck,
    strict_pillow,
)
from .containers import JPEG_HEADER_STEPS, HeaderTooDeep
from .pool import DecodePool
from .probe import MEDIA_TYPES, Header, probe_header, sniff
from .shared import SharedBuffer
from .worker import Original, Passed

__all__ = [
    "ATTACH_AGAIN",
    "JPEG_HEADER_STEPS",
    "MEDIA_TYPES",
    "READ_AGAIN",
    "TRAILING_DATA",
    "Batch",
    "DecodePool",
    "Header",
    "HeaderTooDeep",
    "Inspection",
    "Original",
    "Passed",
    "SharedBuffer",
    "Unwanted",
    "base64_decoded_size",
    "canonical_type",
    "check_batch",
    "decode_base64",
    "decode_base64_shared",
    "inspect",
    "precheck",
    "probe_header",
    "sniff",
    "strict_pillow",
]
