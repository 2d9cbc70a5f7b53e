"""Descriptors read line by line on the event loop, whose waits any cancellation reaches (so that SIGTERM
and SIGINT end a process whose stdin stays open), and the process's own stdin and stdout claimed for the
protocol, so that nothing else in the process reads or writes the host's messages."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator

import anyio

CHUNK = 1 << 16


class FdReads:
    """`await reads()`: the next bytes of a descriptor, b"" at its end, awaited on the event loop where it can
    wait on it. The loop can wait on a pipe, a socket or a terminal; a regular file or /dev/null it cannot
    (epoll refuses them), and reading one never waits for a writer, so a worker thread reads those."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self.pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)

    async def __call__(self) -> bytes:
        if not self.pollable:
            return await anyio.to_thread.run_sync(os.read, self.fd, CHUNK)
        await anyio.wait_readable(self.fd)
        try:
            return os.read(self.fd, CHUNK)  # readable: this does not wait
        except BlockingIOError:  # someone else's reader (a shared terminal) took it first
            return await self()


class Reader:
    """`await reader.line()`: the next line of what `read` gives (b"" at the end), as it came, its newline
    included (the last may have none); None at the end. A line is held whole, however long."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read
        self._pending = bytearray()
        self._scanned = 0  # no newline before this offset of _pending
        self._eof = False

    async def line(self) -> bytes | None:
        while True:
            end = self._pending.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._pending[: end + 1])
                del self._pending[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._pending)
            if self._eof:
                if not self._pending:
                    return None
                line = bytes(self._pending)
                self._pending.clear()
                self._scanned = 0
                return line
            chunk = await self._read()
            if chunk:
                self._pending += chunk
            else:
                self._eof = True


@contextlib.contextmanager
def claimed_fd() -> Iterator[int]:
    """A private duplicate of fd 0 while fd 0 points at /dev/null; fd 0 is restored on exit. With no fd 0 at
    all (the host gave none: Python then has no sys.stdin, and fd 0 may since be anything, the event loop's
    own epoll descriptor say), /dev/null, whose lines end at once."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3) if _fd0_is_stdin() else -1
    except OSError:
        private = -1
    if private < 0:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield null
        finally:
            os.close(null)
        return
    try:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        try:
            yield private
        finally:
            os.dup2(private, 0)
    finally:
        os.close(private)


@contextlib.contextmanager
def claimed_stdout() -> Iterator[int]:
    """A private duplicate of fd 1 while fd 1 points at fd 2: what anything else in the process prints (a
    library, a decode worker started meanwhile) goes to stderr, never into the protocol. Restored on exit."""
    private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr either
            null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            os.dup2(null, 1)
            os.close(null)
        try:
            yield private
        finally:
            os.dup2(private, 1)
    finally:
        os.close(private)


def _fd0_is_stdin() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.fileno() == 0
    except (AttributeError, OSError, ValueError):  # replaced by something without a descriptor
        return False
