"""Logs as one JSON object per line: for a request, the request id, endpoint, status, code, duration, tenant
and ref; never image bytes, base64 or tokens (nothing here is given any)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import logging.handlers
import queue
import sys
import threading
import time
from typing import Any, TextIO

import msgspec

FIELDS = "attachstore_fields"  # the `extra` key a record's structured fields travel under
_GATHER_SECONDS = 0.05  # how late a line may be written


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
    """Hands the record over as it is: the writer's thread formats and writes it, not the event loop
    (the write of every access line was a tenth of a busy worker's loop). The queue stays in the process,
    so nothing needs pickling."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class _Writer:
    """Formats queued records and writes them, on a thread of its own: each time it wakes, everything that
    has been queued meanwhile, as one write (one system call, and one turn of the interpreter lock, for a
    burst of access lines rather than one each)."""

    def __init__(self, lines: queue.SimpleQueue[logging.LogRecord | None], stream: TextIO) -> None:
        self.lines = lines
        self.stream = stream
        self.formatter = JsonFormatter()
        self.thread = threading.Thread(target=self._run, name="attachstore-log", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Write what is queued, then end the thread (waiting a few seconds at most: a process exiting
        must not hang on its log)."""
        self.lines.put(None)
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            batch = [self.lines.get()]
            if batch[0] is not None:
                # Let the burst this line may start gather: woken once for all of it, not once per line
                # (each wake-up takes the interpreter lock from the event loop).
                time.sleep(_GATHER_SECONDS)
            while not self.lines.empty():
                batch.append(self.lines.get())
            text = "".join(self._line(record) for record in batch if record is not None)
            # Standard error closed or gone (OSError, ValueError): there is no one left to tell.
            with contextlib.suppress(OSError, ValueError):
                self.stream.write(text)
                self.stream.flush()
            if None in batch:  # stopped (lines queued after that, by a thread still running, went out too)
                return

    def _line(self, record: logging.LogRecord) -> str:
        try:
            return self.formatter.format(record) + "\n"
        except Exception:  # a bad log call must not end the logging of everything after it
            line = {"level": "error", "msg": f"unformattable log record from {record.name}"}
            return msgspec.json.encode(line).decode() + "\n"


def setup(level: int = logging.INFO) -> None:
    """JSON lines on standard error, for the daemon, formatted and written on a thread of their own.
    Lines still queued when the process exits normally are written first; a SIGKILL loses them."""
    lines: queue.SimpleQueue[logging.LogRecord | None] = queue.SimpleQueue()
    writer = _Writer(lines, sys.stderr)
    writer.start()
    atexit.register(writer.stop)
    root = logging.getLogger()
    root.handlers[:] = [_Enqueue(lines)]
    root.setLevel(level)
    # Lines carry no source location, thread or process, so do not pay for finding them on every call.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a log call: the structured fields of its line."""
    return {FIELDS: {k: v for k, v in values.items() if v is not None}}
