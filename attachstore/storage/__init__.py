"""Bytes under names derived from their reference, and nothing else: the blob store interface and its
local and S3 backends, the staging and fsync discipline, quarantine, and the verified reads. Knows nothing
of images, the index or HTTP."""

from .backend import BlobStore, LocalBackend, StoredObject
from .cache import ReadCache
from .fileops import FileOps
from .listing import Listing, StoredFile
from .local import IN_FLIGHT, LocalBlobStore, Put, Verify
from .mapped import Mapped
from .resident import Resident

__all__ = [
    "IN_FLIGHT",
    "BlobStore",
    "FileOps",
    "Listing",
    "LocalBackend",
    "LocalBlobStore",
    "Mapped",
    "Put",
    "ReadCache",
    "Resident",
    "StoredFile",
    "StoredObject",
    "Verify",
]
