"""Scale-out, end to end: two daemons on one bucket and one database serve each other's refs, keep every
held ref while `attachstore gc` runs beside them, lose no answered ref when one of them dies mid-stream, and
a node's read cache never serves a damaged entry.

The daemons are real processes (`python -m attachstore serve`), started once for the module: node A with a
read cache, node B without. Each test uses images of its own (distinct seeds), so that what one test leaves
behind does not decide another's outcome. Needs S3 and PostgreSQL (tests/support/fixtures.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from attachstore.client import AsyncClient, Image
from attachstore.refs import Ref
from tests.support.daemon import SERVE, Daemon, free_port, launch
from tests.support.faults import flip_byte
from tests.support.fixtures import S3Server, bucket, database, require_postgres, require_s3
from tests.support.images import png
from tests.support.waiting import eventually

ROUTE = "vision"
GC_SECONDS = 120.0
GIVE_UP = 120.0  # seconds: a guard against a hang, not a measure
AFTER_DEATH_SECONDS = 60.0  # for B's five rounds after A's death, then for A's processes to go: guards
LOG_LINES = 40


# -- the daemons -----------------------------------------------------------------------------------------


@dataclass
class Node:
    """One daemon process, with its own data dir, configuration file and log, on a fixed port (a restart
    comes back at the same address)."""

    name: str
    root: Path
    port: int
    daemon: Daemon | None = None

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return None if self.daemon is None else self.daemon.proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.root / "attachstore.toml"

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    def start(self) -> None:
        command = [*SERVE, "--config", str(self.config), "--listen", f"127.0.0.1:{self.port}"]
        # Its own process group: its decode workers go with it at the end.
        self.daemon = launch(command, self.log, self.url, group=True)

    def wait_ready(self) -> None:
        assert self.daemon is not None, f"node {self.name} was not started"
        self.daemon.wait_ready()

    def kill(self) -> None:
        """SIGKILL the daemon itself, as a crash would (its decode workers see their pipes close)."""
        if self.daemon is not None:  # not its process group: what the daemon leaves must go by itself
            self.daemon.send(signal.SIGKILL)
            self.daemon.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop; then whatever is left of its process group."""
        if self.daemon is not None:
            self.daemon.stop()

    def tail(self, lines: int = LOG_LINES) -> str:
        if self.daemon is None:
            return f"--- node {self.name}: not started ---"
        return f"--- node {self.name} ---\n{self.daemon.tail(lines)}"


def daemon_env() -> dict[str, str]:
    """The test's environment without any ATTACHSTORE_ setting that would override the configuration file."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ATTACHSTORE_")}


def toml_config(data_dir: Path, s3: S3Server, bucket: str, dsn: str, cache_dir: Path | None = None) -> str:
    def q(value: str) -> str:
        return json.dumps(value)  # a JSON string is a TOML basic string for everything used here

    lines = [
        f"data_dir = {q(str(data_dir))}",
        "[admission]",
        "decode_workers = 1",
        "[storage]",
        'backend = "s3"',
        f"endpoint = {q(s3.endpoint)}",
        f"bucket = {q(bucket)}",
        f"region = {q(s3.region)}",
        f"access_key_id = {q(s3.access_key)}",
        f"secret_access_key = {q(s3.secret_key)}",
        *([f"cache_dir = {q(str(cache_dir))}"] if cache_dir is not None else []),
        "[index]",
        'backend = "postgresql"',
        f"dsn = {q(dsn)}",
        f'[routes."{ROUTE}"]',
        'input_modalities = ["text", "image"]',
        'provider = "openai-chat"',
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Cluster:
    a: Node  # with a read cache
    b: Node  # without
    s3: S3Server
    bucket: str
    root: Path
    cache_dir: Path

    @property
    def nodes(self) -> tuple[Node, Node]:
        return self.a, self.b

    def logs(self) -> str:
        return "\n".join(n.tail() for n in self.nodes)

    async def gc(self) -> dict[str, Any]:
        """`attachstore gc --grace 0s` from a third process: node B's configuration, a data dir of its own."""
        return await run_gc(self.b.config, self.root / "gc-data")


async def run_gc(config: Path, data_dir: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "attachstore",
        "gc",
        "--config",
        str(config),
        "--data-dir",
        str(data_dir),
        "--grace",
        "0s",
        "--json",
        env=daemon_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), GC_SECONDS)
    except TimeoutError:
        raise AssertionError(f"attachstore gc did not finish within {GC_SECONDS:g} s") from None
    finally:
        if proc.returncode is None:  # timed out, or the test was cancelled
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise AssertionError(f"attachstore gc exited {proc.returncode}: {err.decode(errors='replace')}")
    answer: dict[str, Any] = json.loads(out)
    return answer


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    s3 = require_s3()
    require_postgres()  # fail (or skip) before anything starts
    root = tmp_path_factory.mktemp("multinode")
    with bucket(s3) as name, database() as dsn:
        cache_dir = root / "a" / "cache"
        a, b = Node("A", root / "a", free_port()), Node("B", root / "b", free_port())
        for node, cache in ((a, cache_dir), (b, None)):
            node.root.mkdir(parents=True, exist_ok=True)
            node.config.write_text(toml_config(node.root / "data", s3, name, dsn, cache))
        nodes = Cluster(a, b, s3, name, root, cache_dir)
        try:
            for node in nodes.nodes:  # both boot side by side
                node.start()
            for node in nodes.nodes:
                node.wait_ready()
            yield nodes
        finally:
            for node in nodes.nodes:
                node.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


# -- requests --------------------------------------------------------------------------------------------


def image(seed: int, side: int = 16) -> bytes:
    return png(side, side, seed=seed)


async def admit_json(
    http: aiohttp.ClientSession, node: Node, data: bytes, session: str | None = None, name: str | None = None
) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {
        "source": "user",
        "images": [{"data": base64.b64encode(data).decode(), "media_type": "image/png", "name": name}],
    }
    if session is not None:
        body["session"] = session
    async with http.post(f"{node.url}/v1/attachments", json=body) as answer:
        return answer.status, await answer.json()


async def admit_form(
    http: aiohttp.ClientSession, node: Node, data: bytes, session: str | None = None
) -> tuple[int, dict[str, Any]]:
    form = aiohttp.FormData()
    form.add_field("source", "user")
    if session is not None:
        form.add_field("session", session)
    form.add_field("image", data, filename="image.png", content_type="image/png")
    async with http.post(f"{node.url}/v1/attachments", data=form) as answer:
        return answer.status, await answer.json()


async def admitted(
    http: aiohttp.ClientSession, node: Node, data: bytes, session: str | None = None, *, form: bool = False
) -> str:
    """Admit one image, which must succeed; its ref."""
    status, answer = await (admit_form if form else admit_json)(http, node, data, session)
    if status != 201:
        raise AssertionError(f"node {node.name} answered an admission {status}: {answer}")
    ref: str = answer["attachments"][0]["ref"]
    if ref != str(Ref.of("sha256", data)):
        raise AssertionError(f"node {node.name} answered {ref} for bytes whose sha256 ref is another")
    return ref


async def read(http: aiohttp.ClientSession, node: Node, ref: str) -> tuple[int, bytes]:
    async with http.get(f"{node.url}/v1/attachments/{ref}") as answer:
        return answer.status, await answer.read()


async def check_verified(http: aiohttp.ClientSession, node: Node, ref: str, data: bytes) -> None:
    status, body = await read(http, node, ref)
    if status != 200:
        raise AssertionError(f"node {node.name} answered {status} to a read of {ref}: {body[:300]!r}")
    if body != data or not Ref.parse(ref).matches(body):
        raise AssertionError(f"node {node.name} served bytes other than those of {ref}")


async def check_gone_or_verified(http: aiohttp.ClientSession, node: Node, ref: str, data: bytes) -> None:
    """An unheld ref after a gc: collected (404 ATTACHMENT_NOT_FOUND) or intact, never anything else."""
    status, body = await read(http, node, ref)
    if status == 404:
        code = json.loads(body)["error"]["code"]
        if code != "ATTACHMENT_NOT_FOUND":
            raise AssertionError(f"node {node.name}: 404 {code} for {ref}")
        return
    if status != 200:
        raise AssertionError(f"node {node.name} answered {status} to a read of {ref}: {body[:300]!r}")
    if body != data:
        raise AssertionError(f"node {node.name} served bytes other than those of {ref}")


# -- one node admits, the other serves ---------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["a_to_b", "b_to_a"])
async def test_what_one_node_admits_the_other_serves(
    cluster: Cluster, http: aiohttp.ClientSession, direction: str
) -> None:
    """JSON and multipart admissions on one node; reads, metadata, sessions, holds, a fork and a render on
    the other."""
    origin, other = (cluster.a, cluster.b) if direction == "a_to_b" else (cluster.b, cluster.a)
    seed = 1000 if direction == "a_to_b" else 2000
    as_json, as_form = image(seed, 24), image(seed + 1, 20)
    session, fork = f"cross-{origin.name}", f"cross-{origin.name}-fork"

    status, answer = await admit_json(http, origin, as_json, name="dir/shot.png")
    assert status == 201, answer
    [json_ref] = [a["ref"] for a in answer["attachments"]]
    async with AsyncClient(origin.url) as on_origin, AsyncClient(other.url) as on_other:
        [form_ref] = (
            await on_origin.admit(Image(as_form, "image/png", "form.png"), source="user", route=ROUTE)
        ).refs
        refs = {json_ref: as_json, form_ref: as_form}

        for (ref, data), (side, name) in zip(refs.items(), ((24, "shot.png"), (20, "form.png")), strict=True):
            await check_verified(http, other, ref, data)
            assert await on_other.read(ref) == data  # the client re-hashes it too
            meta = await on_other.meta(ref)
            assert (meta.ref, meta.media_type, meta.bytes) == (ref, "image/png", len(data))
            assert (meta.width, meta.height, meta.frames, meta.name) == (side, side, 1, name)

        created = await on_other.create_session(session, ROUTE)
        assert (created.route, created.holds) == (ROUTE, [])
        assert (await on_other.hold(session, list(refs))).holds == list(refs)
        assert (await on_other.fork(session, fork)).holds == list(refs)
        for client in (on_origin, on_other):  # the sessions are the database's, not a node's
            assert (await client.get_session(fork)).holds == list(refs)
            assert (await client.get_session(session)).route == ROUTE

        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What do these show?"},
                    *({"type": "image", "ref": ref} for ref in refs),
                ],
            }
        ]
        rendered = await on_other.render(messages, session=fork)
        assert rendered.provider == "openai-chat"
        assert (rendered.summary.included, rendered.summary.unavailable) == (2, 0)
        urls = [
            part["image_url"]["url"]
            for part in rendered.body["messages"][0]["content"]
            if part["type"] == "image_url"
        ]
        assert urls == [f"data:image/png;base64,{base64.b64encode(d).decode()}" for d in refs.values()]


# -- gc beside two busy nodes ------------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the nodes answered while gc ran: ref -> bytes, for held and unheld admissions."""

    held: dict[str, bytes] = field(default_factory=dict)
    unheld: dict[str, bytes] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


async def test_gc_beside_busy_nodes_never_takes_a_held_ref(
    cluster: Cluster, http: aiohttp.ClientSession
) -> None:
    """Both nodes admit while gc runs, three times over at least, and on until one gc run overlapped two
    rounds of each node. Each round a node admits image r unheld, image r-1 (admitted unheld a round
    before: a candidate of the running gc) into its session, and a loose image that nothing ever holds (so
    that every gc finds garbage). The two nodes admit the same images, a round apart, so that they dedup
    onto each other's objects too."""
    ledger = Ledger()
    gc_count = 3  # gc runs, at the least
    per_run = 20  # rounds a node admits while one gc runs, at most: bounded on a slow machine
    budget = 900  # rounds a node admits in all, at most: the seeds 3000 + r, 4000 + r, 5000 + r stay apart
    next_round = {cluster.a.name: 1, cluster.b.name: 2}

    def gc_image(r: int) -> bytes:
        return image(3000 + r)

    def loose_image(node: Node, r: int) -> bytes:
        return image((4000 if node is cluster.a else 5000) + r)

    async def admit(node: Node, data: bytes, session: str | None, form: bool, into: dict[str, bytes]) -> None:
        try:
            status, answer = await (admit_form if form else admit_json)(http, node, data, session)
        except aiohttp.ClientError as e:
            ledger.failures.append(f"node {node.name}: no answer to an admission: {e!r}")
            return
        if status != 201:
            ledger.failures.append(f"node {node.name}: admission answered {status}: {answer}")
            return
        into[answer["attachments"][0]["ref"]] = data

    async def busy(node: Node, gc: asyncio.Task[dict[str, Any]]) -> int:
        """Rounds until `gc` ends (or per_run or the budget does); how many."""
        done = 0
        while not gc.done() and done < per_run and next_round[node.name] <= budget:
            done += 1
            r = next_round[node.name]
            next_round[node.name] += 1
            form = r % 2 == 1
            await asyncio.gather(
                admit(node, gc_image(r), None, form, ledger.unheld),
                admit(node, loose_image(node, r), None, not form, ledger.unheld),
            )
            await admit(node, gc_image(r - 1), f"gc-{node.name}", form, ledger.held)
        return done

    async with AsyncClient(cluster.b.url) as client:
        for node in cluster.nodes:
            await client.create_session(f"gc-{node.name}", ROUTE)
    runs: list[dict[str, Any]] = []
    overlap: list[list[int]] = []  # rounds each node admitted while each gc ran
    give_up = time.monotonic() + GIVE_UP
    while len(runs) < gc_count or max(min(o) for o in overlap) < 2:
        assert time.monotonic() < give_up, f"no gc run overlapped two rounds of each node: {overlap}"
        gc = asyncio.create_task(cluster.gc())
        try:
            overlap.append(await asyncio.gather(*(busy(node, gc) for node in cluster.nodes)))
        finally:
            runs.append(await gc)
    assert not ledger.failures, "\n".join(ledger.failures) + "\n" + cluster.logs()
    collected = {ref for run in runs for ref in run["result"]["collected"]}
    assert collected, f"no gc run collected anything: {runs}"

    for node in cluster.nodes:
        outcomes = await asyncio.gather(
            *(check_verified(http, node, ref, data) for ref, data in ledger.held.items()),
            return_exceptions=True,
        )
        lost = [str(e) for e in outcomes if isinstance(e, BaseException)]
        assert not lost, (
            f"{len(lost)} of {len(ledger.held)} held refs do not read back from node {node.name}:\n"
            + "\n".join(lost[:10])
            + f"\ncollected by gc: {len(collected)}\n{cluster.logs()}"
        )
        unheld = {ref: data for ref, data in ledger.unheld.items() if ref not in ledger.held}
        await asyncio.gather(*(check_gone_or_verified(http, node, ref, data) for ref, data in unheld.items()))
    async with AsyncClient(cluster.b.url) as client:
        sessions = [await client.get_session(f"gc-{node.name}") for node in cluster.nodes]
    assert {ref for session in sessions for ref in session.holds} == set(ledger.held)


async def test_gc_runs_beside_a_postgresql_index_without_a_local_index(cluster: Cluster) -> None:
    """The operator's third process has the nodes' configuration and an empty data dir of its own."""
    empty = cluster.root / "gc-empty-data"
    answer = await run_gc(cluster.b.config, empty)
    assert answer["dry_run"] is False


# -- the read cache ----------------------------------------------------------------------------------------


async def test_the_read_cache_serves_hits_and_never_a_damaged_entry(
    cluster: Cluster, http: aiohttp.ClientSession
) -> None:
    """Node A's cache: a read fills it; the next read is a hit (it succeeds while the bucket has lost the
    object); a damaged entry is dropped and fetched again, never served."""
    data = image(6000, 32)
    ref = await admitted(http, cluster.b, data)  # admitted on B: A's cache has not seen it
    name = f"sha256-{Ref.parse(ref).digest}"
    assert not list(cluster.cache_dir.rglob(name))
    await check_verified(http, cluster.a, ref, data)  # a miss, which fills the cache
    [entry] = cluster.cache_dir.rglob(name)
    assert entry.read_bytes() == data

    key = cluster.s3.store(cluster.bucket).key(Ref.parse(ref))
    async with cluster.s3.client() as raw:
        await raw.delete_object(Bucket=cluster.bucket, Key=key)
        await check_verified(http, cluster.a, ref, data)  # only the cache has the bytes now
        status, body = await read(http, cluster.b, ref)  # B has no cache
        assert (status, json.loads(body)["error"]["code"]) == (500, "ATTACHMENT_MISSING")
        # The row is marked missing now: A's cached copy cannot set it right, only the bucket's can.
        status, body = await read(http, cluster.a, ref)
        assert (status, json.loads(body)["error"]["code"]) == (500, "ATTACHMENT_MISSING")
        assert await admitted(http, cluster.b, data) == ref  # an admission writes the object again
        await raw.head_object(Bucket=cluster.bucket, Key=key)

    flip_byte(entry)
    await check_verified(http, cluster.a, ref, data)  # the damaged entry is never served
    [entry] = cluster.cache_dir.rglob(name)
    assert entry.read_bytes() == data  # dropped, and filled again from the bucket
    await check_verified(http, cluster.b, ref, data)


# -- a node dies mid-stream ----------------------------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    """The processes still in process group `pgid` (zombies count as gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if fields[0] != "Z" and int(fields[2]) == pgid:
                    found.append(int(entry.name))
    return found


async def test_a_node_killed_mid_stream_loses_no_answered_ref(
    cluster: Cluster, http: aiohttp.ClientSession
) -> None:
    """A burst of admissions on A, SIGKILL once a few are answered; B admits and reads all the while, and
    every request to B succeeds. Every ref either node answered then reads back from B, and from A after a
    restart."""
    a, b = cluster.a, cluster.b
    burst_size = 24
    async with AsyncClient(b.url) as client:
        await client.create_session("kill-A", ROUTE)
        await client.create_session("kill-B", ROUTE)
    by_a: dict[str, bytes] = {}  # what A answered 201
    by_b: dict[str, bytes] = {}
    held_on_a: set[str] = set()
    a_failures: list[str] = []
    b_failures: list[str] = []
    a_dead = asyncio.Event()
    enough = asyncio.Event()  # A answered three, or all of the burst is over
    over: list[int] = []  # admissions on A that have ended, answered or not

    async def admit_on_a(i: int) -> None:
        data = image(7000 + i, 96)
        session = "kill-A" if i % 2 else None
        try:
            status, answer = await (admit_form if i % 3 else admit_json)(http, a, data, session)
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
            return  # cut off by the kill: not answered, so nothing was promised
        finally:
            over.append(i)
            if len(over) == burst_size:
                enough.set()
        if status != 201:
            a_failures.append(f"node A answered {status}: {answer}")
            return
        ref = answer["attachments"][0]["ref"]
        by_a[ref] = data
        if session is not None:
            held_on_a.add(ref)
        if len(by_a) >= 3:
            enough.set()

    async def keep_b_busy() -> int:
        """Admit into B's session and read back B's previous ref and A's latest answered one, until five
        rounds after A's death (the test waits AFTER_DEATH_SECONDS from the death for them); how many
        rounds after it."""
        r, after_death = 0, 0
        while after_death < 5:
            r += 1
            if a_dead.is_set():
                after_death += 1
            data = image(8000 + r)
            try:
                reads = [*list(by_b.items())[-1:], *list(by_a.items())[-1:]]
                by_b[await admitted(http, b, data, "kill-B", form=r % 2 == 0)] = data
                for ref, earlier in reads:
                    await check_verified(http, b, ref, earlier)
            except (AssertionError, aiohttp.ClientError) as e:
                b_failures.append(f"round {r}: {e}")
        return after_death

    b_busy = asyncio.create_task(keep_b_busy())
    burst = [asyncio.create_task(admit_on_a(i)) for i in range(burst_size)]
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(enough.wait(), 60)
        assert len(by_a) >= 3, f"A answered {len(by_a)} admissions in 60 s\n{a.tail()}"
        in_flight = sum(1 for t in burst if not t.done())
        a.kill()
        a_dead.set()
        died = time.monotonic()
        await asyncio.gather(*burst)
        try:
            after_death = await asyncio.wait_for(b_busy, died + AFTER_DEATH_SECONDS - time.monotonic())
        except TimeoutError:
            raise AssertionError(
                f"B did not go on for five rounds within {AFTER_DEATH_SECONDS:g} s of A's death\n{b.tail()}"
            ) from None
        assert a.proc is not None
        pgid = a.proc.pid
        # Its decode worker sees its pipe close and exits: nothing of A outlives it for long.
        await eventually(
            lambda: not group_members(pgid), "the processes of the killed node A to go", AFTER_DEATH_SECONDS
        )
    finally:
        for task in [*burst, b_busy]:
            task.cancel()
        await asyncio.gather(*burst, b_busy, return_exceptions=True)
        if a.proc is not None and a.proc.poll() is not None:
            a.stop()  # whatever is left of its process group
            a.start()
            await asyncio.to_thread(a.wait_ready)

    assert not a_failures, "\n".join(a_failures) + "\n" + cluster.logs()
    assert not b_failures, "requests to B failed while A died:\n" + "\n".join(b_failures) + "\n" + b.tail()
    assert in_flight > 0, "every admission on A was answered before the kill: nothing was cut off"
    assert after_death == 5

    answered = by_a | by_b
    for node in (b, a):
        outcomes = await asyncio.gather(
            *(check_verified(http, node, ref, data) for ref, data in answered.items()),
            return_exceptions=True,
        )
        lost = [str(e) for e in outcomes if isinstance(e, BaseException)]
        assert not lost, (
            f"{len(lost)} of {len(answered)} answered refs do not read back from node {node.name}:\n"
            + "\n".join(lost[:10])
            + f"\n{cluster.logs()}"
        )
    async with AsyncClient(a.url) as client:
        assert held_on_a <= set((await client.get_session("kill-A")).holds)
        assert set(by_b) == set((await client.get_session("kill-B")).holds)
