"""An idle decode worker that is killed (by an operator, the OOM killer) is not gone at once: until the
kernel has ended it, its pipes are open and a job written to it lands in their buffers, unread. The
worker never had that job, so its death is not the image's doing: the job goes to a live worker, as a job
handed to a worker already dead does (test_dead_workers.py). Made deterministic by stopping the worker
(SIGSTOP) before the job is written and killing it after: a job it provably never read."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
from typing import Any

from tests.support import images
from tests.support.decoders import decode_workers
from tests.support.waiting import until


def _admit(daemon: Any, image: bytes) -> tuple[int, Any]:
    body = {"source": "user", "images": [{"data": base64.b64encode(image).decode()}]}
    return daemon.post("alice", "/v1/attachments", json.dumps(body).encode())  # type: ignore[no-any-return]


def test_a_job_written_to_a_dying_worker_that_never_read_it_goes_to_a_live_one(start_daemon: Any) -> None:
    daemon = start_daemon(admission={"decode_workers": 1})
    status, answer = _admit(daemon, images.png(64, 48, seed=1))
    assert status == 201, answer
    [idle] = decode_workers(daemon.proc.pid)
    os.kill(idle, signal.SIGSTOP)
    answers: list[tuple[int, Any]] = []
    admission = threading.Thread(target=lambda: answers.append(_admit(daemon, images.png(64, 48, seed=2))))
    admission.start()
    try:
        until(lambda: daemon.metric("attachstore_decodes_running") == 1, "the job to be handed to the worker")
    finally:
        os.kill(idle, signal.SIGKILL)
    admission.join(timeout=60)
    assert answers, "the admission did not end"
    [(status, answer)] = answers
    assert status == 201, answer
    assert daemon.metric("attachstore_decodes_total", result="crashed") == 0
