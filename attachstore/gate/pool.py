"""A bounded pool of decode workers (worker.py) with a time bound per image: every piece of image work runs
here, never on the event loop, each job in its tenant's turn (docs/design.md, "The decode worker pool")."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Hashable

from ..config import Limits
from ..errors import AttachstoreError, Rejected, ServerBusy
from ..metrics import Metrics
from .batch import AlreadyDecided, Batch
from .checks import READ_AGAIN, TRAILING_DATA
from .shared import SharedBuffer
from .slots import FairSlots
from .worker import LENGTH, READY, TOOK, Derive, Failed, Job, Outcome, Passed, job_encoder, outcome_decoder

_STREAM_LIMIT = 1 << 16


async def _read_frame(stream: asyncio.StreamReader) -> bytes:
    (length,) = LENGTH.unpack(await stream.readexactly(LENGTH.size))
    return await stream.readexactly(length)


class _Undelivered(Exception): ...


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process, fds: socket.socket) -> None:
        self.proc = proc
        self.fds = fds  # our end of the socket that hands the worker each job's shared memory

    @property
    def alive(self) -> bool:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        return not (
            self.proc.returncode is not None
            or stdin is None
            or stdin.is_closing()
            or stdout is None
            or stdout.at_eof()
        )

    async def ask(self, job: Job | Derive, shared: SharedBuffer | None = None) -> Outcome:
        """Raises _Undelivered if the worker is gone before it says it has the whole job (before it decodes
        anything, so no image ended it)."""
        stdin, stdout = self.proc.stdin, self.proc.stdout
        if stdin is None or stdout is None:  # pragma: no cover - created with both pipes
            raise RuntimeError("worker without pipes")
        try:
            if shared is not None:
                # One datagram with the descriptor, before the frame that announces it; the worker takes
                # each before it answers, so the socket's buffer never holds more than one.
                socket.send_fds(self.fds, [b"m"], [shared.fd])
            body = job_encoder.encode(job)
            stdin.write(LENGTH.pack(len(body)))
            stdin.write(body)
            await stdin.drain()
            took = await _read_frame(stdout)
        except (ConnectionError, asyncio.IncompleteReadError) as e:  # no reader (EPIPE, ECONNREFUSED), or
            raise _Undelivered from e  # it ended before it took the job
        if took != TOOK:
            raise AttachstoreError("a decode worker answered a job it had not said it took")
        return outcome_decoder.decode(await _read_frame(stdout))

    async def stop(self) -> None:
        self.fds.close()
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()


class DecodePool:
    def __init__(self, size: int, timeout: float, metrics: Metrics | None = None) -> None:
        self.size = size
        self.timeout = timeout
        self.metrics = Metrics() if metrics is None else metrics
        self._slots = FairSlots(size)
        self._idle: list[_Worker] = []
        self._closed = False

    async def inspect(
        self,
        data: bytes | SharedBuffer,
        declared: str | None,
        limits: Limits,
        algorithm: str,
        *,
        trailing_data: str = "allow",
        fit_limits: Limits | None = None,
        strip_metadata: bool = False,
        again: str = READ_AGAIN,
        check_key: bytes | None = None,
        convert: bool = False,
        tenant: str | None = None,
        batch: Batch | None = None,
        position: int = 0,
    ) -> Passed:
        """With `fit_limits`, an image over `limits` but within them is normalized to fit, and Passed.data
        holds the bytes to store when they are not `data`; with `convert`, so is a source (HEIC, HEIF, AVIF,
        BMP, TIFF), which is refused without it. As the job at `position` in `batch`, AlreadyDecided instead
        of starting once an earlier one failed."""
        if trailing_data not in TRAILING_DATA:  # here, where a caller's mistake surfaces as its own error
            raise ValueError(f"trailing_data must be 'allow' or 'reject', not {trailing_data!r}")
        shared = data if isinstance(data, SharedBuffer) else None
        inline = b"" if isinstance(data, SharedBuffer) else data
        job = Job(
            inline,
            declared,
            limits,
            algorithm,
            trailing_data,
            fit_limits,
            strip_metadata,
            again,
            check_key=check_key,
            convert=convert,
        )
        if shared is not None:
            shared.seal()
            job.shared = len(shared)
        return await self._run(
            job,
            "the image is pathologically expensive to decode; re-encode it",
            tenant,
            batch,
            position,
            shared,
        )

    async def derive(
        self,
        source: Callable[[], Awaitable[bytes]],
        media_type: str,
        target: tuple[int, int, int],
        limits: Limits,
        source_limits: Limits,
        algorithm: str,
        *,
        preview: bool = False,
        check_key: bytes | None = None,
        tenant: Hashable = "",
    ) -> Passed:
        """The stored bytes are read with `source` only once the job has its worker: a waiting job holds
        none."""
        job = Derive(b"", media_type, target, limits, source_limits, algorithm, preview, check_key)
        return await self._run(
            job, "the stored image is too expensive to resize", tenant, None, 0, load=source
        )

    async def _run(
        self,
        job: Job | Derive,
        slow_hint: str,
        tenant: Hashable,
        batch: Batch | None,
        position: int,
        shared: SharedBuffer | None = None,
        load: Callable[[], Awaitable[bytes]] | None = None,
    ) -> Passed:
        granted = self.timeout if batch is None else await batch.reserve(self.timeout, position)
        if batch is None or granted >= self.timeout:
            too_slow = Rejected(
                "INVALID_IMAGE", f"decoding took longer than {granted:g} s and was stopped", hint=slow_hint
            )
        else:
            too_slow = Rejected(
                "INVALID_IMAGE",
                f"decoding the images of this request took longer than {batch.seconds:g} s in all",
                hint="send fewer images in one request",
            )
        if batch is not None and not granted:
            batch.failed(position)
            raise Rejected(
                "INVALID_IMAGE",
                f"the images of this request used up their {batch.seconds:g} s of decoding before this one "
                "was decoded",
                hint="send fewer images in one request",
            )
        clock = [0.0, 0.0]  # when a worker got the job, and when it was done with it
        try:
            self.metrics.decodes_waiting.inc()
            try:
                await self._slots.acquire(tenant)
            finally:
                self.metrics.decodes_waiting.dec()
            try:
                if batch is not None and not batch.needed(position):
                    raise AlreadyDecided
                if load is not None:
                    job.data = await load()
                outcome = await self._ask(job, granted, clock, too_slow, shared)
                if isinstance(outcome, Failed) and batch is not None:
                    batch.failed(position)
            except Rejected:
                if batch is not None:
                    batch.failed(position)
                raise
            finally:
                # After the failure is marked: a sibling given the worker now sees it, and does not start.
                self._slots.release()
        finally:
            if batch is not None:
                batch.give_back(granted, clock[1] - clock[0])
        if isinstance(outcome, Failed):
            raise Rejected(outcome.code, outcome.message, hint=outcome.hint)
        return outcome

    async def _ask(
        self,
        job: Job | Derive,
        seconds: float,
        clock: list[float],
        too_slow: Rejected,
        shared: SharedBuffer | None = None,
    ) -> Outcome:
        if self._closed:
            raise AttachstoreError("the decode pool is closed")
        worker = await self._worker()
        self.metrics.decodes_running.inc()
        clock[0] = clock[1] = time.monotonic()
        result = "crashed"
        try:
            try:
                outcome = await asyncio.wait_for(worker.ask(job, shared), seconds)
            except _Undelivered:
                # Gone before it had the job (killed while idle, and not yet seen to be): no image ended it.
                await worker.stop()
                worker = await self._spawn()
                clock[0] = time.monotonic()
                outcome = await asyncio.wait_for(worker.ask(job, shared), seconds)
            result = "rejected" if isinstance(outcome, Failed) else "passed"
        except _Undelivered as e:  # a worker just started, gone before its first job: not the image's doing
            await worker.stop()
            raise AttachstoreError("a decode worker exited before it could take a job") from e
        except TimeoutError:
            result = "timeout"
            await worker.stop()
            raise too_slow from None
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            await worker.stop()
            raise Rejected("INVALID_IMAGE", "the image decoder failed on this image") from e
        except asyncio.CancelledError:  # the request was decided without this image, or its client left
            result = "cancelled"
            await worker.stop()
            raise
        except BaseException:
            await worker.stop()
            raise
        finally:
            clock[1] = time.monotonic()
            self.metrics.decodes_running.dec()
            self.metrics.decodes.labels(result).inc()
        if self._closed:
            await worker.stop()
        else:
            self._idle.append(worker)
        return outcome

    async def _worker(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive:
                return worker
            await worker.stop()
        return await self._spawn()

    async def _spawn(self) -> _Worker:
        _headroom()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "attachstore.gate",
                "--fds",
                str(theirs.fileno()),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=_STREAM_LIMIT,
                env=_worker_env(),
                pass_fds=(theirs.fileno(),),
            )
        except OSError as e:
            ours.close()
            if e.errno in _SHORT_OF or e.errno is None or e.errno <= 0:
                # Out of descriptors, processes or memory, in this process (the pipes) or in the child before
                # it could run (which reports no errno of its own): a moment's trouble, answered as such.
                raise ServerBusy(f"cannot start a decode worker now: {e}", hint="retry later") from e
            raise AttachstoreError(f"cannot start a decode worker: {e}") from e
        except BaseException:  # the job cancelled while its worker process was being made
            ours.close()
            raise
        finally:
            theirs.close()
        worker = _Worker(proc, ours)
        try:
            if proc.stdout is None or await _read_frame(proc.stdout) != READY:
                raise AttachstoreError("a decode worker started but did not say it was ready")
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            await worker.stop()
            raise AttachstoreError("a decode worker exited while starting") from e
        except BaseException:  # not ready, or the job cancelled while its worker started
            await worker.stop()
            raise
        return worker

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(w.stop() for w in idle))


# What starting a worker may run short of, for a moment.
_SHORT_OF = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})

# Descriptors a worker's start takes at once: our socket pair, the child's pipes (uvloop makes a socket pair
# for each), the pipe that reports a failed exec, and some to spare.
_START_DESCRIPTORS = 16


def _headroom() -> None:
    """A start that fails for want of descriptors leaks: uvloop does not close the pipes it made for the
    child. Nothing runs on the loop between this and the start."""
    taken: list[int] = []
    try:  # (of a descriptor opened here: 0 may be closed, in a daemon started with `<&-`)
        taken.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        while len(taken) < _START_DESCRIPTORS:
            taken.append(os.dup(taken[0]))
    except OSError as e:
        if e.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        raise ServerBusy(
            "cannot start a decode worker now: the process is short of descriptors", hint="retry later"
        ) from None
    finally:
        for fd in taken:
            os.close(fd)


# Variables that may carry secrets or the daemon's configuration (S3 keys, the index DSN with its password):
# a decode worker parses hostile bytes and needs none of them.
_SECRET_PREFIXES = ("ATTACHSTORE_", "AWS_", "PG")


def _worker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_SECRET_PREFIXES)}
