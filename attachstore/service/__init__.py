"""The service: the one place that owns the order of operations. Edges (HTTP, CLI) call it; it calls the
gate (through the decode pool), the blob store and the index."""

from ..vocabulary import SESSION_ID_PATTERN, SOURCES
from .admission import Admission
from .model import ImageRef, Upload
from .policy import Declaration, Diagnostic, RouteTable, accepts_images, model_text
from .previews import SIZES as PREVIEW_SIZES
from .previews import SIZES_HINT as PREVIEW_SIZES_HINT
from .store import Store
from .storepolicy import Applied, own_policy
from .variants import VariantSpec

__all__ = [
    "PREVIEW_SIZES",
    "PREVIEW_SIZES_HINT",
    "SESSION_ID_PATTERN",
    "SOURCES",
    "Admission",
    "Applied",
    "Declaration",
    "Diagnostic",
    "ImageRef",
    "RouteTable",
    "Store",
    "Upload",
    "VariantSpec",
    "accepts_images",
    "model_text",
    "own_policy",
]
