"""The command line: parse, call the service or the maintenance work, print."""

from .main import main

__all__ = ["main"]
