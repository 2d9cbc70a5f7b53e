"""attachstore: a verified, content-addressed attachment store for LLM agent hosts."""

__version__ = "0.1.0"
