"""Logs as one JSON object per line: for a request, the request id, endpoint, status, code, duration, tenant
and ref; never image bytes, base64 or tokens (nothing here is given any)."""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
import time
from typing import Any

import msgspec

FIELDS = "attachstore_fields"  # the `extra` key a record's structured fields travel under


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, FIELDS, {}))
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return msgspec.json.encode(line, enc_hook=str).decode()


class _Enqueue(logging.handlers.QueueHandler):
    """Hands the record over as it is: the listener's thread formats and writes it, not the event loop
    (the write of every access line was a tenth of a busy worker's loop). The queue stays in the process,
    so nothing needs pickling."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


def setup(level: int = logging.INFO) -> None:
    """JSON lines on standard error, for the daemon, formatted and written on a thread of their own.
    Lines still queued when the process exits normally are written first; a SIGKILL loses them."""
    stream = logging.StreamHandler()
    stream.setFormatter(JsonFormatter())
    lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(lines, stream)
    listener.start()
    atexit.register(listener.stop)
    root = logging.getLogger()
    root.handlers[:] = [_Enqueue(lines)]
    root.setLevel(level)
    # Lines carry no source location, so do not pay for finding the caller of every log call.
    logging._srcfile = None


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a log call: the structured fields of its line."""
    return {FIELDS: {k: v for k, v in values.items() if v is not None}}
