"""An A/B of the read scenario between source trees: `python -m tests.bench.ab NAME=TREE NAME=TREE ...`.

Each tree is a checkout of attachstore (a worktree of another commit, or one with a fast path switched off).
Its daemon (`serve` with the bench's workers, the tree first on PYTHONPATH and as the working directory, so
that its workers import it too) serves the read scenario's objects to wrk, the trees taking turns round after
round. Two figures per run: reads per second, and CPU per read, the daemon's processes' user and system time
over the run divided by the reads answered. Where the machine is shared, CPU per read is the steadier of
the two: it counts the work a read costs, not how much of the machine the daemon was given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from .drive import Driver
from .procs import CHECK_KEY, attachstore_command, free_port, ready_or_stopped, stop_child, tree
from .workload import MULTIPART, Item, multipart, read_images

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User and system time of `pid` and its descendants, as the kernel counts them."""
    total = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


class _Served:
    def __init__(self, name: str, source: Path, work: Path, images: list[Item]) -> None:
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(source), "ATTACHSTORE_CHECK_KEY": CHECK_KEY}
        self.log = open(work / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        data = work / f"{name}-data"
        self.proc = subprocess.Popen(
            [*attachstore_command(), "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{self.port}"],
            stdout=self.log,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            cwd=source,
            env=env,
        )
        ready_or_stopped(self.base + "/healthz", self.proc, self.stop)
        self.paths = [f"/v1/attachments/{self._admit(image)}" for image in images]

    def _admit(self, item: Item) -> str:
        request = urllib.request.Request(self.base + "/v1/attachments", data=multipart(item), method="POST")
        request.add_header("Content-Type", MULTIPART)
        with urllib.request.urlopen(request, timeout=120) as answer:
            ref: str = json.loads(answer.read())["attachments"][0]["ref"]
        return ref

    def stop(self) -> None:
        stop_child(self.proc, (signal.SIGTERM, 30))
        self.log.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.ab", description=__doc__)
    parser.add_argument("trees", nargs="+", metavar="NAME=TREE")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args(argv)
    wrk = shutil.which("wrk")
    with tempfile.TemporaryDirectory(prefix="attachstore-ab-") as scratch:
        work = Path(scratch)
        driver = Driver(wrk, work)
        images = read_images(20)
        served = []
        try:
            for spec in args.trees:
                name, _, source = spec.partition("=")
                served.append(_Served(name, Path(source).resolve(), work, images))
            for s in served:  # warm: every object read once into the page cache and the daemon's memory
                driver.run(s.base, 16, 2.0, paths=s.paths)
            figures: dict[tuple[str, int], list[tuple[float, float]]] = {}
            for r in range(args.rounds):
                order = served if r % 2 == 0 else served[::-1]
                for c in args.connections:
                    for s in order:
                        before = _cpu_seconds(s.proc.pid)
                        result = driver.run(s.base, c, args.seconds, paths=s.paths)
                        spent = _cpu_seconds(s.proc.pid) - before
                        if result.get("errors"):
                            raise RuntimeError(f"{s.name}: {result['errors']} errors at c={c}")
                        figures.setdefault((s.name, c), []).append(
                            (result["rps"], 1e6 * spent / max(1, result["requests"]))
                        )
        finally:
            for s in served:
                s.stop()
    first = served[0].name
    print(f"{'tree':<14} {'c':>3} {'reads/s (median)':>17} {'CPU µs/read (median)':>21} {'vs ' + first:>14}")
    for c in args.connections:
        base_cpu = statistics.median(cpu for _, cpu in figures[(first, c)])
        for s in served:
            runs = figures[(s.name, c)]
            rps = statistics.median(x for x, _ in runs)
            cpu = statistics.median(y for _, y in runs)
            print(f"{s.name:<14} {c:>3} {rps:>17,.0f} {cpu:>21,.0f} {cpu / base_cpu:>13.2f}×")
        for s in served:
            runs = figures[(s.name, c)]
            print(f"  {s.name} c={c} rounds: " + ", ".join(f"{x:,.0f}/s {y:,.0f} µs" for x, y in runs))


if __name__ == "__main__":
    main()
