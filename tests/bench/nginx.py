"""A temporary nginx serving a directory of static files on loopback: the read scenario's baseline."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from .procs import free_port, ready_or_stopped, stop_child

CONFIG = """\
worker_processes auto;
daemon off;
master_process on;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    types {{
        image/jpeg jpg;
        image/png png;
        image/webp webp;
    }}
    default_type application/octet-stream;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{
        }}
    }}
}}
"""


class Nginx:
    """nginx -c <temporary config> -p <temporary prefix>, in the foreground, as a child process."""

    def __init__(self, binary: str, root: Path, prefix: Path) -> None:
        self.binary, self.root, self.prefix = binary, root, prefix
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Nginx:
        self.prefix.mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(CONFIG.format(prefix=self.prefix, port=self.port, root=self.root))
        log = open(self.prefix / "stderr.log", "wb")
        try:
            self.proc = subprocess.Popen(
                [self.binary, "-c", str(conf), "-p", str(self.prefix), "-e", str(self.prefix / "error.log")],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            log.close()
            raise
        log.close()
        ready_or_stopped(self.base + "/", self.proc, self.stop)
        return self

    def stop(self) -> None:
        # SIGQUIT is graceful: the master stops its workers.
        stop_child(self.proc, (signal.SIGQUIT, 10), (signal.SIGTERM, 10))

    def __exit__(self, *exc: object) -> None:
        self.stop()
