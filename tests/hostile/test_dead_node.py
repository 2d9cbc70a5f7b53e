"""A daemon SIGKILLed and restarted at once with another [limits]: the node it was is dead (a zombie, or its
workers stopping), and the new daemon starts; it waits for a node that is stopping, and never names a dead one
as serving the store (issue 31, finding 7)."""

from __future__ import annotations

import signal
import socket

from tests.support.daemon import Daemons, state
from tests.support.waiting import until

LIMITS = "[limits]\nmax_side = 3000\n"


def test_a_sigkilled_daemon_left_a_zombie_and_the_restart_with_other_limits_starts(daemons: Daemons) -> None:
    first = daemons.start(*daemons.store(""), "--workers", "1").proc
    first.send_signal(signal.SIGKILL)
    # Not reaped: the node's process is a zombie, which kill(pid, 0) still finds.
    until(lambda: state(first.pid) == "Z", "the killed daemon to be a zombie")
    daemons.start(*daemons.store(LIMITS), "--workers", "1")
    assert first.poll() == -signal.SIGKILL


def test_a_sigkilled_supervisor_whose_workers_are_stopping_is_waited_for(daemons: Daemons) -> None:
    first = daemons.start(*daemons.store(""), "--workers", "2")
    # An upload in flight: the worker that has it goes on serving it once it is told to stop.
    upload = socket.create_connection(("127.0.0.1", int(first.url.rsplit(":", 1)[1])))
    upload.sendall(
        b"POST /v1/attachments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000000\r\n\r\n" + b'{"source": "user", "images": [{"data": "' + b"A" * 1000
    )
    first.proc.send_signal(signal.SIGKILL)  # its workers get SIGTERM, and stop
    first.proc.wait(timeout=60)
    second = daemons.start(*daemons.store(LIMITS), "--workers", "2", wait=False)
    log = second.log
    try:
        until(
            lambda: "to stop" in log.read_text() or second.proc.poll() is not None, "the new daemon to wait"
        )
        assert second.proc.poll() is None, log.read_text()
        assert "serves this store" not in log.read_text()
    finally:
        upload.close()  # the upload ends, and with it the stopping worker
    second.wait_ready()
