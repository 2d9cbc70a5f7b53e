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
from typing import Any, NamedTuple, TextIO

import msgspec
import msgspec.structs

FIELDS = "attachstore_fields"  # the `extra` key a record's structured fields travel under
_GATHER_SECONDS = 0.05  # how late a line may be written


class _Stamps:
    """The `ts` of a line, to the millisecond: formatted once per millisecond (and the date and time once
    per second), not once per line."""

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
        self._ts = _Stamps()

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
    """Hands the record over as it is: the writer's thread formats and writes it, not the event loop
    (the write of every access line was a tenth of a busy worker's loop). The queue stays in the process,
    so nothing needs pickling."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class Line(NamedTuple):
    """An INFO line that skips `logging` on its way to the writer (see `info`): what the caller knows, in a
    tuple, formatted on the writer's thread into the line a record with the same fields would make."""

    created: float  # time.time() when it was logged
    logger: str
    msg: str
    fields: msgspec.Struct  # encoded with omit_defaults: a field left at None is absent, as with `fields()`


Queued = logging.LogRecord | Line | None  # None: the writer's stop


class _Writer:
    """Formats queued records and writes them, on a thread of its own: each time it wakes, everything that
    has been queued meanwhile, as one write (one system call, and one turn of the interpreter lock, for a
    burst of access lines rather than one each)."""

    def __init__(self, lines: queue.SimpleQueue[Queued], stream: TextIO) -> None:
        self.lines = lines
        self.stream = stream
        self.formatter = JsonFormatter()
        self._ts = _Stamps()
        self._encode = msgspec.json.Encoder(enc_hook=str).encode
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

    def _line(self, item: logging.LogRecord | Line) -> str:
        try:
            if isinstance(item, Line):
                return self._direct(item)
            return self.formatter.format(item) + "\n"
        except Exception:  # a bad log call must not end the logging of everything after it
            name = item.logger if isinstance(item, Line) else item.name
            line = {"level": "error", "msg": f"unformattable log record from {name}"}
            return msgspec.json.encode(line).decode() + "\n"

    def _direct(self, line: Line) -> str:
        """The JSON object JsonFormatter makes of a record, in its key order: ts, level, logger, msg, then
        the fields."""
        head = self._encode(
            {"ts": self._ts(line.created), "level": "info", "logger": line.logger, "msg": line.msg}
        )
        body = self._encode(line.fields)
        if body == b"{}":
            return head.decode() + "\n"
        return (head[:-1] + b"," + body[1:]).decode() + "\n"


_direct: queue.SimpleQueue[Queued] | None = None  # the writer's queue, once `setup` has made the writer
_handler: logging.Handler | None = None  # the one handler `setup` put on the root logger


def info(logger: logging.Logger, msg: str, line_fields: msgspec.Struct) -> None:
    """Log `msg` at INFO with these fields: the line `logger.info(msg, extra=fields(...))` makes, for a few
    microseconds instead of twenty. With the daemon's own logging (`setup`) and nothing else listening on
    the way from `logger` to the root, it goes straight onto the writer's queue; otherwise it is an
    ordinary record, so that handlers, filters and pytest's caplog see it."""
    if not logger.isEnabledFor(logging.INFO):
        return
    if _direct is not None and _only_the_writer(logger):
        _direct.put(Line(time.time(), logger.name, msg, line_fields))
        return
    values = msgspec.structs.asdict(line_fields)
    logger.info(msg, extra={FIELDS: {k: v for k, v in values.items() if v is not None}})


def _only_the_writer(logger: logging.Logger) -> bool:
    """Whether a record from `logger` would reach the writer's handler and nothing else."""
    node: logging.Logger | None = logger
    while node is not None and node.parent is not None:  # every logger but the root
        if node.handlers or node.filters or not node.propagate:
            return False
        node = node.parent
    root = logging.getLogger()
    return not root.filters and len(root.handlers) == 1 and root.handlers[0] is _handler


def setup(level: int = logging.INFO) -> None:
    """JSON lines on standard error, for the daemon, formatted and written on a thread of their own.
    Lines still queued when the process exits normally are written first; a SIGKILL loses them."""
    global _direct, _handler
    lines: queue.SimpleQueue[Queued] = queue.SimpleQueue()
    writer = _Writer(lines, sys.stderr)
    writer.start()
    atexit.register(writer.stop)
    root = logging.getLogger()
    _handler = _Enqueue(lines)
    root.handlers[:] = [_handler]
    _direct = lines
    root.setLevel(level)
    # Lines carry no source location, thread or process, so do not pay for finding them on every call.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def fields(**values: Any) -> dict[str, Any]:
    """`extra=` for a log call: the structured fields of its line."""
    return {FIELDS: {k: v for k, v in values.items() if v is not None}}
