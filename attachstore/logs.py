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
_STOP_SECONDS = 5.0  # how long a process exiting waits for its last lines to be written


class _Timestamps:
    # formatted once per millisecond (the date and time once per second), not once per line

    def __init__(self) -> None:
        self._second = self._milli = -1
        self._date = self._text = ""

    def __call__(self, created: float) -> str:
        milli = int(created * 1000)
        if milli != self._milli:
            second = milli // 1000
            if second != self._second:
                self._date = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
                self._second = second
            self._text = f"{self._date}.{milli % 1000:03d}Z"
            self._milli = milli
        return self._text


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._ts = _Timestamps()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self._ts(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, FIELDS, {}))
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return msgspec.json.encode(line, enc_hook=str).decode()


class _Enqueue(logging.handlers.QueueHandler):
    """The record is handed over as it is, for the writer's thread to format off the event loop; the queue
    stays in the process, so nothing needs pickling."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class _Writer(logging.handlers.QueueListener):
    """Woken by the first line of a burst, it writes them all at once: one system call, and one turn of the
    interpreter lock, for a burst of access lines."""

    def __init__(self, records: queue.SimpleQueue[logging.LogRecord], stream: TextIO) -> None:
        super().__init__(records)
        self.records = records  # and the listener's stop marker, once stopped
        self.stream = stream
        self.formatter = JsonFormatter()
        self._gathered: list[str] = []
        self._stopping = False

    def dequeue(self, block: bool) -> logging.LogRecord:
        if not self.records.empty():
            return self.records.get(block)
        self._write()  # the burst is over
        record = self.records.get(block)
        if not self._stopping:
            time.sleep(_GATHER_SECONDS)  # woken once for the burst this line may start, not once per line
        return record

    def handle(self, record: logging.LogRecord) -> None:
        try:
            line = self.formatter.format(record)
        except Exception:  # a bad log call must not end the logging of everything after it
            line = msgspec.json.encode(
                {"level": "error", "msg": f"unformattable log record from {record.name}"}
            ).decode()
        self._gathered.append(line + "\n")

    def enqueue_sentinel(self) -> None:
        self._stopping = True
        super().enqueue_sentinel()

    def stop(self) -> None:
        # a few seconds at most: a process exiting must not hang on a log that nobody reads
        finishing = threading.Thread(target=self._finish, name="attachstore-log-stop", daemon=True)
        finishing.start()
        finishing.join(timeout=_STOP_SECONDS)

    def _finish(self) -> None:
        super().stop()
        # A thread still logging while the process exits may have queued lines behind the stop.
        while not self.records.empty():
            record = self.records.get_nowait()
            if isinstance(record, logging.LogRecord):  # not a second stop marker
                self.handle(record)
        self._write()

    def _write(self) -> None:
        text = "".join(self._gathered)
        self._gathered.clear()
        if text:
            # Standard error closed or gone (OSError, ValueError): there is no one left to tell.
            with contextlib.suppress(OSError, ValueError):
                self.stream.write(text)
                self.stream.flush()


def setup(level: int = logging.INFO) -> None:
    """Lines still queued when the process exits normally are written first; a SIGKILL loses them."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    writer = _Writer(records, sys.stderr)
    writer.start()
    atexit.register(writer.stop)
    root = logging.getLogger()
    root.handlers[:] = [_Enqueue(records)]
    root.setLevel(level)
    # Lines carry no source location, thread or process, so records need not look them up. `_srcfile` is the
    # switch the logging HOWTO's "Optimization" section documents; tests/api/test_observe.py checks it holds.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def fields(**values: Any) -> dict[str, Any]:
    return {FIELDS: {k: v for k, v in values.items() if v is not None}}
