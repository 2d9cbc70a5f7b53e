"""Reads racing an ordinary gc: mallory reads objects that nothing holds while `attachstore gc --grace 0s`
sweeps in a loop beside the daemon, admitting each again once it is gone. A read that gc overtakes (row
looked up, then file and row collected) is a ref that no longer exists: 404 ATTACHMENT_NOT_FOUND, never a
500 ATTACHMENT_MISSING, and no integrity failure is counted. Alice, who holds her image, is served
throughout.

Each reader reads at least READS times, and all go on until gc has swept at least once and overtaken or
collected under them (a 404): a slow machine gets a longer run, never a weaker one."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from attachstore.client import Client, Image
from tests.hostile.conftest import TOKENS
from tests.support.images import png

OBJECTS = 24
READERS = 4
READS = 500  # per reader, at the least: with the old code, about a dozen were overtaken and answered 500
GIVE_UP = 120.0  # seconds: a guard against a hang, not a measure


def status_of(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


def integrity_failures(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        lines = answer.read().decode().splitlines()
    return sum(float(x.split()[-1]) for x in lines if x.startswith("attachstore_integrity_failures_total{"))


def test_reads_that_gc_overtakes_are_not_found(start_daemon: Any) -> None:
    daemon = start_daemon()
    config = daemon.data_dir.parent / "config0.toml"
    images = [png(6, 6, seed=100 + i) for i in range(OBJECTS)]
    stop = threading.Event()
    collected = threading.Event()  # a reader was answered 404
    sweeps = 0

    def sweep() -> None:
        nonlocal sweeps
        while not stop.is_set():
            command = [sys.executable, "-m", "attachstore", "gc", "--config", str(config), "--grace", "0s"]
            subprocess.run(command, check=True, capture_output=True)
            sweeps += 1

    with (
        Client(daemon.url, token=TOKENS["mallory"]) as mallory,
        Client(daemon.url, token=TOKENS["alice"]) as alice,
    ):
        refs = [mallory.admit(Image(i), source="user").refs[0] for i in images]
        alices = png(7, 7, seed=1)
        alice.create_session("keep")
        [held] = alice.admit(Image(alices), source="user", session="keep").refs
        headers = daemon.headers("mallory")
        give_up = time.monotonic() + GIVE_UP

        def going(n: int) -> bool:
            assert time.monotonic() < give_up, (
                f"after {GIVE_UP:g} s: {sweeps} gc sweeps, a 404 seen: {collected.is_set()}"
            )
            return n < READS or sweeps < 1 or not collected.is_set()

        def read(worker: int) -> Counter[int]:
            seen: Counter[int] = Counter()
            n = 0
            with Client(daemon.url, token=TOKENS["mallory"]) as again:
                while going(n):
                    i = (worker * 7 + n) % OBJECTS
                    n += 1
                    status = status_of(f"{daemon.url}/v1/attachments/{refs[i]}", headers)
                    seen[status] += 1
                    if status == 404:  # collected: admit it again, as a host would
                        collected.set()
                        again.admit(Image(images[i]), source="user")
            return seen

        sweeper = threading.Thread(target=sweep)
        sweeper.start()
        try:
            with ThreadPoolExecutor(READERS) as pool:
                seen = sum(pool.map(read, range(READERS)), Counter[int]())
        finally:
            stop.set()
            sweeper.join()
        assert sweeps > 0
        assert seen[404] > 0  # gc did collect under the readers
        assert set(seen) <= {200, 404}, seen
        assert integrity_failures(daemon.url) == 0
        assert alice.read(held) == alices
    assert daemon.peak_rss() < 300 << 20
