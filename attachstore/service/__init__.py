"""The service: the one place that owns the order of operations. Edges (HTTP, CLI) call it; it calls the
gate (through the decode pool), the blob store and the index."""

from .admission import SOURCES, Admission, Upload, display_name
from .model import ImageRef, Normalization
from .policy import Diagnostic, accepts_images, model_text
from .sessions import SESSION_ID_PATTERN
from .store import Store
from .variants import VariantSpec

__all__ = [
    "SESSION_ID_PATTERN",
    "SOURCES",
    "Admission",
    "Diagnostic",
    "ImageRef",
    "Normalization",
    "Store",
    "Upload",
    "VariantSpec",
    "accepts_images",
    "display_name",
    "model_text",
]
