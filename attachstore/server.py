"""Running the app: listen on TCP or a Unix socket, stop cleanly on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import stat

from aiohttp import web

from .api import make_app
from .config import Config
from .errors import ConfigError

log = logging.getLogger("attachstore.server")
SHUTDOWN_TIMEOUT = 30.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_open_mode(config: Config) -> None:
    """Without tokens the daemon is open, so it may only be reachable from this machine."""
    if config.unix_socket or config.tenants:
        return
    host, _ = config.host_port
    if not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {config.listen} without access tokens: an open store may only listen on "
            "a loopback address (127.0.0.1, ::1) or a Unix socket (--unix-socket PATH). To serve other "
            "machines, make a token with `attachstore token new --tenant NAME` and add the [[tenants]] "
            "lines it prints to the configuration"
        )


def _clear_stale_socket(path: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"unix_socket: {path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # left behind by a daemon that did not stop cleanly
            return
    raise ConfigError(f"unix_socket: another daemon is already serving on {path}")


async def serve(config: Config) -> None:
    check_open_mode(config)
    app = make_app(config)
    runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None)
    await runner.setup()
    bound_socket: str | None = None
    try:
        if config.unix_socket:
            _clear_stale_socket(config.unix_socket)
            site: web.BaseSite = web.UnixSite(runner, config.unix_socket)
            where = f"unix:{config.unix_socket}"
        else:
            host, port = config.host_port
            site = web.TCPSite(runner, host, port)
            where = f"http://{config.listen}"
        await site.start()
        bound_socket = config.unix_socket  # ours from here on, so ours to remove
        log.info("attachstore serving %s on %s", config.data_dir, where)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("stopping: finishing in-flight requests")
    finally:
        # Stops accepting, lets in-flight admissions finish (or publish nothing), then closes the store.
        await runner.cleanup()
        if bound_socket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(bound_socket)
