"""A bounded pool of decode workers (see worker.py) with a time bound per image: every piece of image work
(the gate's decode, normalization, variants) runs here, never on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

from ..config import Limits
from ..errors import AttachstoreError, Rejected
from .checks import TRAILING_DATA
from .worker import LENGTH, READY, Derive, Failed, Job, Outcome, Passed, job_encoder, outcome_decoder

_STREAM_LIMIT = 1 << 16


async def _read_frame(stream: asyncio.StreamReader) -> bytes:
    (length,) = LENGTH.unpack(await stream.readexactly(LENGTH.size))
    return await stream.readexactly(length)


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def ask(self, job: Job | Derive) -> Outcome:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        if stdin is None or stdout is None:  # pragma: no cover - created with both pipes
            raise RuntimeError("worker without pipes")
        body = job_encoder.encode(job)
        stdin.write(LENGTH.pack(len(body)))
        stdin.write(body)
        await stdin.drain()
        return outcome_decoder.decode(await _read_frame(stdout))

    async def stop(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()


class DecodePool:
    """At most `size` images decode at once; each gets `timeout` seconds before its worker is killed."""

    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Worker] = []
        self._closed = False

    async def inspect(
        self,
        data: bytes,
        declared: str | None,
        limits: Limits,
        algorithm: str,
        *,
        trailing_data: str = "allow",
        fit_limits: Limits | None = None,
        strip_metadata: bool = False,
    ) -> Passed:
        """The deep checks; raises `Rejected` with the gate's code, or INVALID_IMAGE past the time bound.
        `trailing_data` is gate.inspect's ("allow" or "reject"). With `fit_limits`, an image over `limits`
        but within `fit_limits` is normalized to fit `limits`; with `strip_metadata`, metadata is removed.
        Passed.data holds the bytes to store when they are not `data`."""
        if trailing_data not in TRAILING_DATA:  # here, where a caller's mistake surfaces as its own error
            raise ValueError(f"trailing_data must be 'allow' or 'reject', not {trailing_data!r}")
        return await self._run(
            Job(data, declared, limits, algorithm, trailing_data, fit_limits, strip_metadata),
            "the image is pathologically expensive to decode; re-encode it",
        )

    async def derive(
        self,
        data: bytes,
        media_type: str,
        target: tuple[int, int, int],
        limits: Limits,
        source_limits: Limits,
        algorithm: str,
    ) -> Passed:
        """A variant of a stored image within `target` (max side, max pixels, max bytes), checked by the
        gate with `limits`; Passed.data holds its bytes. Raises `Rejected` when none fits."""
        return await self._run(
            Derive(data, media_type, target, limits, source_limits, algorithm),
            "the stored image is too expensive to resize",
        )

    async def _run(self, job: Job | Derive, slow_hint: str) -> Passed:
        async with self._slots:
            if self._closed:
                raise AttachstoreError("the decode pool is closed")
            worker = self._idle.pop() if self._idle else await self._spawn()
            try:
                outcome = await asyncio.wait_for(worker.ask(job), self.timeout)
            except TimeoutError:
                await worker.stop()
                raise Rejected(
                    "INVALID_IMAGE",
                    f"decoding took longer than {self.timeout:g} s and was stopped",
                    hint=slow_hint,
                ) from None
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                await worker.stop()
                raise Rejected("INVALID_IMAGE", "the image decoder failed on this image") from e
            except BaseException:
                await worker.stop()
                raise
            if self._closed:
                await worker.stop()
            else:
                self._idle.append(worker)
        if isinstance(outcome, Failed):
            raise Rejected(outcome.code, outcome.message, hint=outcome.hint)
        return outcome

    async def _spawn(self) -> _Worker:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "attachstore.gate",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=_STREAM_LIMIT,
                env=_worker_env(),
            )
        except OSError as e:
            raise AttachstoreError(f"cannot start a decode worker: {e}") from e
        worker = _Worker(proc)
        try:
            if proc.stdout is None or await _read_frame(proc.stdout) != READY:
                raise AttachstoreError("a decode worker started but did not say it was ready")
        except (asyncio.IncompleteReadError, ConnectionError) as e:
            await worker.stop()
            raise AttachstoreError("a decode worker exited while starting") from e
        return worker

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(w.stop() for w in idle))


# Variables that may carry secrets or the daemon's configuration (S3 keys, the index DSN with its password):
# a decode worker parses hostile bytes and needs none of them.
_SECRET_PREFIXES = ("ATTACHSTORE_", "AWS_", "PG")


def _worker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_SECRET_PREFIXES)}
