"""Request ids, JSON request logs, and /metrics."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import queue
import subprocess
import sys
import threading
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from attachstore import logs
from attachstore.api.common import STORE
from attachstore.logs import JsonFormatter
from tests.conftest import MakeClient
from tests.support.faults import flip_byte
from tests.support.http import admit, object_path
from tests.support.images import png

Client = TestClient[Any, Any]


async def samples(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(await response.text()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


async def test_counters_move_as_requests_are_made(client: Client, data_dir: Any) -> None:
    before = await samples(client)
    assert before[("attachstore_objects", ())] == 0
    image = png(10, 10)
    assert (await admit(client, image)).status == 201
    assert (await admit(client, image)).status == 201  # a dedup hit
    assert (await admit(client, b"not an image")).status == 422
    ref = (await (await admit(client, image)).json())["attachments"][0]["ref"]
    assert (await client.get(f"/v1/attachments/{ref}")).status == 200
    flip_byte(object_path(data_dir, ref), 20)
    assert (await client.get(f"/v1/attachments/{ref}")).status == 500
    after = await samples(client)
    assert after[("attachstore_admissions_total", (("result", "admitted"), ("source", "user")))] == 3
    assert (
        after[("attachstore_admissions_total", (("result", "UNSUPPORTED_IMAGE_TYPE"), ("source", "user")))]
        == 1
    )
    assert after[("attachstore_dedup_hits_total", ())] == 2
    assert after[("attachstore_images_admitted_total", ())] == 3
    assert after[("attachstore_reads_total", (("result", "ok"),))] == 1
    assert after[("attachstore_reads_total", (("result", "corrupt"),))] == 1
    assert after[("attachstore_integrity_failures_total", (("kind", "corrupt"),))] == 1
    assert after[("attachstore_objects", ())] == 1
    latency = (
        "attachstore_request_duration_seconds_count",
        (("endpoint", "/v1/attachments"), ("method", "POST"), ("status", "201")),
    )
    assert after[latency] == 3


async def test_heals_and_maintenance_runs_are_counted(client: Client, data_dir: Any) -> None:
    from attachstore.api.common import STORE
    from attachstore.maintenance import gc

    image = png(11, 11)
    ref = (await (await admit(client, image)).json())["attachments"][0]["ref"]
    object_path(data_dir, ref).unlink()
    assert (await admit(client, image)).status == 201
    store = client.app[STORE]
    await gc.execute(store, await gc.plan(store, grace=0))
    after = await samples(client)
    assert after[("attachstore_heals_total", ())] == 1
    assert (
        after[("attachstore_maintenance_last_run_result", (("command", "gc"), ("figure", "collected")))] == 1
    )
    assert after[("attachstore_maintenance_last_run_timestamp_seconds", (("command", "gc"),))] > 0


async def test_request_ids_are_accepted_or_made_and_echoed(client: Client) -> None:
    given = await client.get("/healthz", headers={"X-Request-Id": "host-42.turn-7"})
    assert given.headers["X-Request-Id"] == "host-42.turn-7"
    made = await client.get("/healthz", headers={"X-Request-Id": "bad id with spaces"})
    assert len(made.headers["X-Request-Id"]) == 32
    assert made.headers["X-Request-Id"] != (await client.get("/healthz")).headers["X-Request-Id"]


async def test_logs_never_carry_images_base64_or_tokens(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    token = "secret-token-of-alpha"
    tenants = [{"name": "alpha", "token_sha256": hashlib.sha256(token.encode()).hexdigest()}]
    routes = {"vision": {"input_modalities": ["text", "image"], "provider": "anthropic"}}
    client = await make_client(tenants=tenants, routes=routes)
    headers = {"Authorization": f"Bearer {token}", "X-Request-Id": "r-1"}
    image = png(30, 30)
    encoded = base64.b64encode(image).decode()
    caplog.set_level(logging.INFO, logger="attachstore")
    response = await client.post(
        "/v1/attachments", json={"source": "user", "images": [{"data": encoded}]}, headers=headers
    )
    ref = (await response.json())["attachments"][0]["ref"]
    rendered = await client.post(
        "/v1/render",
        json={"route": "vision", "messages": [{"role": "user", "content": [{"type": "image", "ref": ref}]}]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert encoded[:40] in await rendered.text()  # the body does carry it; the logs must not
    await client.get("/v1/routes", headers={"Authorization": "Bearer wrong-token"})
    lines = [JsonFormatter().format(r) for r in caplog.records]
    text = "\n".join(lines)
    for secret in (encoded[:40], encoded[-40:], token, "wrong-token"):
        assert secret not in text
    access = [json.loads(line) for line in lines if '"msg":"request"' in line]
    assert [a["endpoint"] for a in access] == ["/v1/attachments", "/v1/render", "/v1/routes"]
    first = access[0]
    assert (first["request_id"], first["status"], first["tenant"], first["method"]) == (
        "r-1",
        201,
        "alpha",
        "POST",
    )
    assert first["duration_ms"] >= 0
    assert access[2]["code"] == "UNAUTHORIZED"


def _record(msg: str, *args: object, **fields: Any) -> logging.LogRecord:
    record = logging.LogRecord("attachstore.access", logging.INFO, __file__, 1, msg, args, None)
    record.attachstore_fields = fields
    return record


def test_the_log_writer_writes_every_queued_line_in_order_once_stopped() -> None:
    lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    out = io.StringIO()
    writer = logs._Writer(lines, out)
    threads = set(threading.enumerate())
    writer.start()
    for n in range(500):
        lines.put(_record("request", n=n))
    lines.put(_record("bad %d", "text"))  # its arguments do not fit its message: formatting fails
    lines.put(_record("request", n=500))
    writer.stop()
    written = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [w.get("n") for w in written[:500]] == list(range(500))
    assert written[500] == {"level": "error", "msg": "unformattable log record from attachstore.access"}
    assert written[501]["n"] == 500
    assert set(threading.enumerate()) <= threads  # the writer's thread has ended


def test_log_lines_still_queued_at_exit_are_written() -> None:
    program = (
        "import logging; from attachstore import logs; logs.setup(); "
        "[logging.getLogger('attachstore.x').info('line %d', n) for n in range(200)]"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert [json.loads(line)["msg"] for line in done.stderr.splitlines()] == [f"line {n}" for n in range(200)]


def test_the_daemons_records_look_up_no_caller() -> None:
    """Finding each record's caller walks the stack, on every line of the event loop; the daemon's lines do
    not carry it, and `logging._srcfile = None` is how the logging HOWTO says to skip it. This fails if
    Python stops honouring it."""
    program = (
        "import logging; from attachstore import logs; logs.setup(); "
        "seen = []; h = logging.Handler(); h.emit = seen.append; logging.getLogger().addHandler(h); "
        "logging.getLogger('attachstore.x').info('line'); print(seen[0].funcName, seen[0].lineno)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["(unknown", "function)", "0"]


def test_the_log_writer_ends_even_with_lines_queued_after_its_stop() -> None:
    """A thread still logging while the process exits may queue lines behind the stop marker."""
    lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    out = io.StringIO()
    writer = logs._Writer(lines, out)
    threads = set(threading.enumerate())
    lines.put(_record("before"))
    writer.enqueue_sentinel()
    lines.put(_record("after"))
    writer.start()
    writer.stop()
    assert set(threading.enumerate()) <= threads
    assert [json.loads(line)["msg"] for line in out.getvalue().splitlines()] == ["before", "after"]


def test_the_daemons_access_lines_reach_standard_error() -> None:
    program = (
        "from attachstore import logs; from attachstore.api import observe; from attachstore.metrics import "
        "Metrics; logs.setup(); m = Metrics(); "
        "[observe.record(m, f'r-{n}', 'GET', '/v1/attachments/{ref}', 200, 0.0015, tenant='t') "
        "for n in range(3)]"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(line["request_id"], line["duration_ms"], line["tenant"]) for line in lines] == [
        (f"r-{n}", 1.5, "t") for n in range(3)
    ]
    assert "code" not in lines[0]
    assert lines[0]["logger"] == "attachstore.access"


async def test_made_request_ids_differ_and_latencies_count_per_label(client: Client) -> None:
    ids = {(await client.get("/healthz")).headers["X-Request-Id"] for _ in range(5)}
    assert len(ids) == 5
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    await client.get("/v1/attachments/sha256:" + "0" * 64)  # 404, another child of the histogram
    store = client.app[STORE]
    count = store.metrics.registry.get_sample_value
    labels = {"method": "GET", "endpoint": "/healthz", "status": "200"}
    assert count("attachstore_request_duration_seconds_count", labels) == 5
    missing = {"method": "GET", "endpoint": "/v1/attachments/{ref}", "status": "404"}
    assert count("attachstore_request_duration_seconds_count", missing) == 1
