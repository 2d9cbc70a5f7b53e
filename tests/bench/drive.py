"""Running the load generator as a separate process: wrk where installed, else the bundled one.

Both sides of a comparison always go through the same `Driver`, so they get the same client."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

Result = dict[str, Any]

_WRK_SCRIPT = r"""
local paths = {}
for line in io.lines("%(paths)s") do
  if #line > 0 then paths[#paths + 1] = line end
end
local method = "%(method)s"
local headers = {}
local body = nil
if "%(body)s" ~= "" then
  local f = assert(io.open("%(body)s", "rb"))
  body = f:read("*a")
  f:close()
  headers["Content-Type"] = "%(content_type)s"
end
local n = 0
request = function()
  n = n + 1
  return wrk.format(method, paths[(n %% #paths) + 1], headers, body)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\n{"requests": %%d, "duration_us": %%d, "bytes": %%d, "p50_us": %%f, "p99_us": %%f, "max_us": %%f, '
    .. '"connect": %%d, "read": %%d, "write": %%d, "status": %%d, "timeout": %%d}\n',
    summary.requests, summary.duration, summary.bytes, latency:percentile(50), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.status, e.timeout))
end
"""


class Driver:
    """One load generator for a whole comparison. `wrk` is the wrk binary, or None for the bundled one;
    `at_least_one` has the bundled one make a request on every connection however short the run (the
    smoke run's: a window with no request has no latency to report)."""

    def __init__(self, wrk: str | None, workdir: Path, at_least_one: bool = False) -> None:
        self.wrk = wrk
        self.workdir = workdir
        self.at_least_one = at_least_one
        self.name = "wrk" if wrk else "bundled"
        self._n = 0

    def _file(self, suffix: str, text: str) -> Path:
        self._n += 1
        path = self.workdir / f"drive-{self._n}{suffix}"
        path.write_text(text)
        return path

    def run(
        self,
        base: str,
        connections: int,
        duration: float,
        *,
        paths: list[str] | None = None,
        body: Path | None = None,
        content_type: str | None = None,
    ) -> Result:
        """GET the paths in turn (or POST `body` to them) for `duration` s on `connections` connections."""
        paths = paths or ["/"]
        if duration <= 0:  # a warm-up that was switched off
            return {}
        if self.wrk:
            return self._wrk(base, connections, duration, paths, body, content_type)
        paths_file = self._file(".paths", "\n".join(paths) + "\n")
        args = [
            base,
            "--connections",
            str(connections),
            "--duration",
            str(duration),
            "--paths",
            str(paths_file),
        ]
        if body is not None:
            args += ["--body", str(body), "--content-type", content_type or "application/octet-stream"]
        if self.at_least_one:
            args.append("--at-least-one")
        return bundled(args, timeout=duration + 120)

    def _wrk(
        self,
        base: str,
        connections: int,
        duration: float,
        paths: list[str],
        body: Path | None,
        content_type: str | None,
    ) -> Result:
        assert self.wrk is not None
        paths_file = self._file(".paths", "\n".join(paths) + "\n")
        script = self._file(
            ".lua",
            _WRK_SCRIPT
            % {
                "paths": paths_file,
                "method": "POST" if body is not None else "GET",
                "body": body or "",
                "content_type": content_type or "application/octet-stream",
            },
        )
        threads = min(2, connections)
        seconds = max(1, math.ceil(duration))
        done = subprocess.run(
            [
                self.wrk,
                f"-t{threads}",
                f"-c{connections}",
                f"-d{seconds}s",
                "--timeout",
                "30s",
                "-s",
                str(script),
                base,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout[-500:]}")
        r = json.loads(lines[-1])
        seconds_run = r["duration_us"] / 1e6
        errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
        return {
            "tool": "wrk",
            "requests": r["requests"],
            "rps": r["requests"] / seconds_run if seconds_run else 0.0,
            "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000,
            "max_ms": r["max_us"] / 1000,
            "errors": errors,
            "bytes": r["bytes"],
            "seconds": seconds_run,
        }


def bundled(args: list[str], timeout: float) -> Result:
    """Run the bundled load generator (python -m tests.bench.loadgen ARGS) and return its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench.loadgen", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    result: Result = json.loads(done.stdout)
    return result


def post_each(url: str, bodies: list[Path], content_type: str, connections: int, workdir: Path) -> Result:
    """POST every body exactly once (the bundled generator: wrk cannot send each of a list exactly once)."""
    listing = workdir / f"bodies-{bodies[0].stem}-{len(bodies)}.list"
    listing.write_text("\n".join(str(b) for b in bodies) + "\n")
    return bundled(
        [url, "--connections", str(connections), "--bodies", str(listing), "--content-type", content_type],
        timeout=600,
    )
