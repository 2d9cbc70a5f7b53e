"""The backends of tests/index/test_conformance.py, for the other test modules of the index too."""

from tests.index.test_conformance import blank, index, shared_database, store

__all__ = ["blank", "index", "shared_database", "store"]
