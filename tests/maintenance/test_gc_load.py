"""GC under load: admissions of overlapping content, holds and session deletions run while gc with a zero
grace period sweeps in a loop, in this process (its own connections) and as `attachstore gc` processes.

The load runs for at least SECONDS, and on until both collectors have swept enough times and something was
collected: a slow machine gets a longer run, never a weaker one."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

from aiohttp.test_utils import TestClient

from attachstore.maintenance import gc
from attachstore.refs import Ref
from attachstore.service import Store
from tests.conftest import MakeClient, MakeConfig
from tests.support.http import admit
from tests.support.images import gif, png

SECONDS = 4.0
WORKERS = 6
ROUNDS = 10  # in-process sweeps, at the least
RUNS = 1  # `attachstore gc` processes, at the least
GIVE_UP = 120.0  # seconds: a guard against a hang, not a measure


async def test_no_answered_and_held_ref_is_ever_lost(
    make_client: MakeClient, make_config: MakeConfig
) -> None:
    client: TestClient[Any, Any] = await make_client()
    images = [png(8, 8, seed=i) for i in range(8)] + [gif(6, 6, seed=i) for i in range(4)]
    loop = asyncio.get_running_loop()
    deadline, give_up = loop.time() + SECONDS, loop.time() + GIVE_UP
    answered: dict[str, set[str]] = {}
    released: set[str] = set()
    rounds = runs = collected = 0

    def going() -> bool:
        assert loop.time() < give_up, (rounds, runs, collected)
        return loop.time() < deadline or rounds < ROUNDS or runs < RUNS or not collected

    async def worker(w: int) -> None:
        rng = random.Random(w)
        n = 0
        while going():
            sid = f"w{w}-{n}"
            n += 1
            assert (await client.put(f"/v1/sessions/{sid}", json={})).status == 201
            answered[sid] = set()
            own = png(5, 5, seed=1000 * (w + 1) + n)  # garbage once this session is deleted
            for batch in ([own, rng.choice(images)], rng.sample(images, 2), rng.sample(images, 2)):
                response = await admit(client, *batch, session=sid)
                assert response.status == 201, await response.text()
                answered[sid].update(a["ref"] for a in (await response.json())["attachments"])
            others = [s for s in answered if s != sid and s not in released and answered[s]]
            if others:
                ref = rng.choice(sorted(answered[rng.choice(others)]))
                response = await client.post(f"/v1/sessions/{sid}/holds", json={"refs": [ref]})
                if response.status == 200:  # else collected after its session was deleted: a 404
                    answered[sid].add(ref)
                else:
                    assert response.status == 404
            if rng.random() < 0.5:
                released.add(sid)
                assert (await client.delete(f"/v1/sessions/{sid}")).status == 200

    async def collector() -> None:
        nonlocal rounds, collected
        store = await Store.open(make_config())  # its own connections, as a cron job would have
        try:
            while going():
                result = await gc.execute(store, await gc.plan(store, grace=0))
                rounds += 1
                collected += len(result.collected)
                await asyncio.sleep(0.01)
        finally:
            await store.close()

    async def gc_processes() -> None:
        nonlocal runs, collected
        data_dir = str(make_config().data_dir)
        while going():
            proc = await asyncio.create_subprocess_exec(
                *(
                    sys.executable,
                    "-m",
                    "attachstore",
                    "gc",
                    "--data-dir",
                    data_dir,
                    "--grace",
                    "0s",
                    "--json",
                ),
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await proc.communicate()
            assert proc.returncode == 0
            runs += 1
            collected += len(json.loads(out)["result"]["collected"])

    await asyncio.gather(*(worker(w) for w in range(WORKERS)), collector(), gc_processes())

    for sid, refs in answered.items():
        if sid in released:
            continue
        session = await (await client.get(f"/v1/sessions/{sid}")).json()
        assert set(session["holds"]) == refs
        for ref in refs:
            response = await client.get(f"/v1/attachments/{ref}")
            assert response.status == 200, (sid, ref)
            assert Ref.parse(ref).matches(await response.read())
