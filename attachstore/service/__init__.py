"""The service: the one place that owns the order of operations. Edges (HTTP, CLI) call it; it calls the
gate (through the decode pool), the blob store and the index."""

from .sessions import SESSION_ID_PATTERN
from .store import SOURCES, Admission, ImageRef, Store, Upload, VariantSpec, display_name

__all__ = [
    "SESSION_ID_PATTERN",
    "SOURCES",
    "Admission",
    "ImageRef",
    "Store",
    "Upload",
    "VariantSpec",
    "display_name",
]
