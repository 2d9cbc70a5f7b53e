"""Serving the MCP server: over stdio (what hosts start for a local server), or over streamable HTTP on a
loopback address. The backend is closed when the client goes away (stdin closes) or on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
from collections.abc import Callable, Iterator
from typing import Any, cast

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server

from . import stdin
from .backends import Backend

LOOPBACK_NAMES = ("localhost",)


def loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def stdio(server: Server[Any], backend: Backend) -> None:
    """Until the client closes stdin (and its requests are answered), or SIGTERM or SIGINT (stdin may stay
    open: its reading is cancellable, see stdin.py)."""
    task = asyncio.current_task()
    assert task is not None
    serving = True

    def stop() -> None:
        nonlocal serving
        if serving:
            serving = False
            task.cancel()

    with _on_signals(stop):
        try:
            with stdin.claimed() as lines:
                # stdio_server() takes an anyio.AsyncFile; it only iterates over it for lines.
                async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
                    await server.run(read, lines.through(write), server.create_initialization_options())
        except asyncio.CancelledError:
            if task.cancelling() == 0:
                raise
            task.uncancel()
        finally:
            serving = False
            await backend.close()


async def http(server: Server[Any], backend: Backend, host: str, port: int) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp, with the SDK's DNS-rebinding protection: only requests
    whose Host (and Origin, if any) name this loopback address are served."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    shown = f"[{host}]" if ":" in host else host
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{shown}:*", "localhost:*"],
        allowed_origins=[f"http://{shown}:*", "http://localhost:*"],
    )
    app = server.streamable_http_app(host=host, transport_security=security)

    class Quiet(uvicorn.Server):
        # uvicorn's own handling sends the signal again once it has stopped, so the process would die of it.
        def capture_signals(self) -> contextlib.nullcontext[None]:  # type: ignore[override]
            return contextlib.nullcontext()

    served = Quiet(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    with _on_signals(lambda: setattr(served, "should_exit", True)):
        try:
            await served.serve()
        finally:
            await backend.close()


@contextlib.contextmanager
def _on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT call `stop` for as long as the block runs, the backend's close included, and once
    one has come, the process ignores both until it exits: a host that sends one and then the other (Claude
    Code sends SIGINT, then SIGTERM 100 ms later) must not kill it while its store closes."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    came = False

    def received() -> None:
        nonlocal came
        came = True
        stop()

    for s in signals:
        loop.add_signal_handler(s, received)
    try:
        yield
    finally:
        for s in signals:
            loop.remove_signal_handler(s)
            if came:
                signal.signal(s, signal.SIG_IGN)
