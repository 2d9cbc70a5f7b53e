"""Whole-store work beside the service: garbage collection, the audit, and migration between backends."""
