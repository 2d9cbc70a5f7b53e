"""One policy per store, through real processes: daemons (`python -m attachstore serve`) and the command line
on the same data dir, or on one PostgreSQL index (docs/configuration.md#one-policy-per-store).

The first test is issue 17's reproduction: a daemon serves with gpt-4o declared vision and deepseek-chat
text-only; `attachstore session route chat-1 deepseek-chat`, run without --config on the same data dir, for a
session that holds an image, must end in ROUTE_SWITCH_REJECTED.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.daemon import Daemon, Daemons, clean_env
from tests.support.fixtures import database, require_postgres
from tests.support.images import png
from tests.support.waiting import until

ISSUE = """
[routes."gpt-4o"]
input_modalities = ["text", "image"]

[routes."deepseek-chat"]
input_modalities = ["text"]

[routes."local-llm"]
input_modalities = ["text"]
"""
OTHER = """
[routes."gpt-4o"]
input_modalities = ["text", "image"]

[limits]
max_side = 4000
"""
READY_SECONDS = 60.0


def attachstore(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "attachstore", *argv],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def call(daemon: Daemon, method: str, path: str, body: object) -> dict[str, object]:
    request = urllib.request.Request(
        daemon.url + path,
        method=method,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        answer: dict[str, object] = json.loads(r.read())
        return answer


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def exited(daemon: Daemon) -> tuple[int, str]:
    code = daemon.proc.wait(timeout=READY_SECONDS)
    return code, daemon.log.read_text()


def test_a_switch_without_config_applies_the_daemons_routes(tmp_path: Path, daemons: Daemons) -> None:
    data = str(tmp_path / "data")
    config = write(tmp_path / "attachstore.toml", ISSUE)
    daemon = daemons.start("--config", str(config), "--data-dir", data)
    call(daemon, "PUT", "/v1/sessions/chat-1", {"route": "gpt-4o"})
    image = {"data": base64.b64encode(png(16, 10)).decode(), "media_type": "image/png"}
    call(daemon, "POST", "/v1/attachments", {"source": "user", "session": "chat-1", "images": [image]})

    switch = attachstore("session", "route", "--data-dir", data, "chat-1", "deepseek-chat")
    assert switch.returncode == 1, switch
    assert "ROUTE_SWITCH_REJECTED" in switch.stderr
    # A route only the daemon's configuration declares: without its policy the switch would be allowed.
    switch = attachstore("session", "route", "--data-dir", data, "chat-1", "local-llm")
    assert (switch.returncode, "ROUTE_SWITCH_REJECTED" in switch.stderr) == (1, True), switch
    # With a configuration of its own that differs, the command refuses and names the difference.
    other = write(tmp_path / "other.toml", OTHER)
    switch = attachstore(
        "session", "route", "--config", str(other), "--data-dir", data, "chat-1", "local-llm"
    )
    assert switch.returncode == 2, switch
    assert 'routes."local-llm": declared in the store\'s policy, not here' in switch.stderr
    assert "limits.max_side: 2000 in the store's policy, 4000 here" in switch.stderr
    shown = json.loads(attachstore("session", "show", "--data-dir", data, "chat-1").stdout)
    assert shown["route"] == "gpt-4o"
    listed = attachstore("routes", "--data-dir", data).stdout.splitlines()
    assert listed[3].split()[:2] == ["local-llm", "text"]


def test_a_second_daemon_with_other_routes_refuses_unless_told_to(tmp_path: Path, daemons: Daemons) -> None:
    data = str(tmp_path / "data")
    first = daemons.start("--config", str(write(tmp_path / "a.toml", ISSUE)), "--data-dir", data)
    other = str(write(tmp_path / "b.toml", OTHER))
    code, log = exited(daemons.start("--config", other, "--data-dir", data, wait=False))
    assert code == 2, log
    assert "serves this store with another policy" in log
    assert 'routes."deepseek-chat": declared on that node, not here' in log
    assert "limits.max_side: 2000 on that node, 4000 here" in log
    assert first.ready() == 200

    second = daemons.start("--config", other, "--data-dir", data, "--replace-policy")
    assert second.ready() == 200
    assert first.ready() == 503  # its policy is no longer the store's: load balancers drain it
    # Commands now apply the new policy, the one the last daemon recorded.
    listed = attachstore("routes", "--data-dir", data, "--json")
    assert [r["id"] for r in json.loads(listed.stdout)["routes"] if r["declared_by"] == "config"] == [
        "gpt-4o"
    ]


def test_a_restart_with_a_new_configuration_replaces_the_policy(tmp_path: Path, daemons: Daemons) -> None:
    data = str(tmp_path / "data")
    first = daemons.start("--config", str(write(tmp_path / "a.toml", ISSUE)), "--data-dir", data)
    first.proc.terminate()
    assert first.proc.wait(timeout=30) == 0
    recorded = json.loads(attachstore("routes", "--data-dir", data, "--json").stdout)["policy"]
    again = daemons.start("--config", str(write(tmp_path / "b.toml", OTHER)), "--data-dir", data)
    assert again.ready() == 200
    assert json.loads(attachstore("routes", "--data-dir", data, "--json").stdout)["policy"] != recorded
    # the log is written by a thread of its own
    until(lambda: "the store's policy changes" in again.log.read_text(), "the policy's change to be logged")
    assert "limits.max_side: 2000 before, 4000 here" in again.log.read_text()


def test_two_nodes_of_one_postgresql_index(tmp_path: Path, daemons: Daemons) -> None:
    require_postgres()
    with database() as dsn:
        shared = f'[index]\nbackend = "postgresql"\ndsn = {json.dumps(dsn)}\n'
        a = write(tmp_path / "a.toml", shared + ISSUE)
        b = write(tmp_path / "b.toml", shared + OTHER)
        first = daemons.start("--config", str(a), "--data-dir", str(tmp_path / "node-a"))
        code, log = exited(
            daemons.start("--config", str(b), "--data-dir", str(tmp_path / "node-b"), wait=False)
        )
        assert code == 2, log
        assert 'routes."local-llm": declared on that node, not here' in log
        twin = daemons.start("--config", str(a), "--data-dir", str(tmp_path / "node-c"))
        assert (first.ready(), twin.ready()) == (200, 200)
        # A command with only the index in its configuration applies the fleet's policy.
        c = write(tmp_path / "c.toml", shared)
        resolved = json.loads(attachstore("routes", "--config", str(c), "local-llm", "--json").stdout)
        assert resolved["route"]["declared_by"] == "config"
        daemons.stop()
