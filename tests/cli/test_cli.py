"""The command line: in-process for the local commands, a real process for `serve`."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from attachstore.cli import main
from attachstore.cores import cores
from attachstore.refs import Ref
from tests.support.daemon import Daemons
from tests.support.images import jpeg, png
from tests.support.waiting import until


@pytest.fixture
def image_file(tmp_path: Path) -> Path:
    path = tmp_path / "shot.png"
    path.write_bytes(png(12, 7))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_put_get_stat(capsys: pytest.CaptureFixture[str], tmp_path: Path, image_file: Path) -> None:
    data_dir = str(tmp_path / "data")
    code, out, _ = run(capsys, "put", "--data-dir", data_dir, "--json", str(image_file))
    assert code == 0
    [a] = json.loads(out)["attachments"]
    ref = str(Ref.of("sha256", image_file.read_bytes()))
    assert a == {
        "ref": ref,
        "media_type": "image/png",
        "bytes": image_file.stat().st_size,
        "width": 12,
        "height": 7,
        "frames": 1,
        "name": "shot.png",
    }
    code, out, _ = run(capsys, "put", "--data-dir", data_dir, str(image_file))
    assert (code, out.split()[0]) == (0, ref)

    target = tmp_path / "back.png"
    assert run(capsys, "get", "--data-dir", data_dir, ref, "-o", str(target))[0] == 0
    assert target.read_bytes() == image_file.read_bytes()

    code, out, _ = run(capsys, "stat", "--data-dir", data_dir, ref)
    assert (code, json.loads(out)["width"]) == (0, 12)


def test_put_rejection_exits_1_with_the_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, image_file: Path
) -> None:
    code, _, err = run(
        capsys, "put", "--data-dir", str(tmp_path), "--media-type", "image/jpeg", str(image_file)
    )
    assert code == 1
    assert "IMAGE_TYPE_MISMATCH (image 0)" in err


def test_get_unknown_and_malformed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        capsys, "get", "--data-dir", str(tmp_path), "sha256:" + "0" * 64, "-o", str(tmp_path / "x")
    )
    assert (code, "ATTACHMENT_NOT_FOUND" in err) == (1, True)
    code, _, err = run(capsys, "stat", "--data-dir", str(tmp_path), "sha256:../../etc/passwd")
    assert (code, "INVALID_ATTACHMENT_REF" in err) == (1, True)


def test_bad_config_exits_2_naming_the_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[limits]\nmax_sides = 3\n")
    code, _, err = run(capsys, "stat", "--config", str(config), "sha256:" + "0" * 64)
    assert code == 2
    assert "limits.max_sides" in err


def test_missing_input_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "put", "--data-dir", str(tmp_path), str(tmp_path / "nope.png"))
    assert code == 1
    assert "nope.png" in err


def test_python_dash_m() -> None:
    done = subprocess.run([sys.executable, "-m", "attachstore", "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.startswith("attachstore ")


def test_serve_admits_reads_and_stops_cleanly_on_sigterm(tmp_path: Path, daemons: Daemons) -> None:
    daemon = daemons.start(ATTACHSTORE_DATA_DIR=str(tmp_path / "data"))
    base = daemon.url
    image = jpeg(20, 10)
    body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]}).encode()
    request = urllib.request.Request(
        f"{base}/v1/attachments", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        ref = json.loads(r.read())["attachments"][0]["ref"]
    with urllib.request.urlopen(f"{base}/v1/attachments/{ref}", timeout=30) as r:
        assert r.read() == image
    # A local command on the same data dir while the daemon serves it; the daemon reads its work.
    other = tmp_path / "other.png"
    other.write_bytes(png(9, 9))
    assert main(["put", "--data-dir", str(tmp_path / "data"), str(other)]) == 0
    with urllib.request.urlopen(f"{base}/v1/attachments/{Ref.of('sha256', other.read_bytes())}") as r:
        assert r.read() == other.read_bytes()
    daemon.stop_cleanly()


def test_serve_on_a_unix_socket(tmp_path: Path, daemons: Daemons) -> None:
    path = tmp_path / "a.sock"
    daemon = daemons.start(unix_socket=path, ready="/healthz", ATTACHSTORE_DATA_DIR=str(tmp_path / "data"))
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        answer = s.recv(100)
    assert answer.split(b"\r\n")[0].endswith(b" 200 OK")
    daemon.stop_cleanly(signal.SIGINT)
    assert not path.exists()


def test_serve_refuses_an_open_non_loopback_address(tmp_path: Path) -> None:
    env = {**os.environ, "ATTACHSTORE_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-m", "attachstore", "serve", "--listen", "0.0.0.0:8731"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "without access tokens" in done.stderr


def test_session_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path, image_file: Path) -> None:
    d = ["--data-dir", str(tmp_path / "data")]
    assert run(capsys, "session", "create", *d, "s1", "--route", "some-model")[0] == 0
    code, out, _ = run(capsys, "put", *d, "--session", "s1", "--json", str(image_file))
    ref = json.loads(out)["attachments"][0]["ref"]
    code, out, _ = run(capsys, "session", "fork", *d, "s1", "s2")
    assert (code, json.loads(out)["holds"]) == (0, [ref])
    code, out, _ = run(capsys, "session", "delete", *d, "s1")
    assert json.loads(out) == {"session": "s1", "released": 1}
    code, out, _ = run(capsys, "session", "show", *d, "s2")
    shown = json.loads(out)
    assert shown.pop("created").endswith("Z")
    assert shown.pop("last_used").endswith("Z")
    assert shown == {"session": "s2", "route": "some-model", "holds": [ref], "ttl": None, "expires": None}
    code, out, _ = run(capsys, "session", "create", *d, "s2", "--route", "some-model", "--ttl", "1d12h")
    shown = json.loads(out)
    assert (shown["ttl"], shown["holds"], shown["expires"] > shown["last_used"]) == (129600, [ref], True)
    code, _, err = run(capsys, "session", "create", *d, "s3", "--ttl", "forever")
    assert (code, err) == (2, "attachstore: --ttl: not a duration: 'forever' (e.g. 30d, 12h, 90m)\n")
    code, _, err = run(capsys, "session", "create", *d, "s3", "--ttl", "3651d")
    assert (code, "a lifetime is 1 second to 3650 days" in err) == (2, True)
    code, _, err = run(capsys, "session", "show", *d, "s1")
    assert (code, "SESSION_NOT_FOUND" in err) == (1, True)


def test_put_from_a_tool_without_a_vision_route_degrades(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, image_file: Path
) -> None:
    code, _, err = run(capsys, "put", "--data-dir", str(tmp_path), "--source", "tool", str(image_file))
    assert code == 1
    assert "nothing admitted (degraded)" in err
    assert "MODALITY_UNSUPPORTED" in err


def test_serve_leaves_another_daemons_socket_alone(tmp_path: Path) -> None:
    path = tmp_path / "busy.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        other.listen()
        env = {**os.environ, "ATTACHSTORE_DATA_DIR": str(tmp_path / "data")}
        done = subprocess.run(
            [sys.executable, "-m", "attachstore", "serve", "--unix-socket", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2
        assert "already serving" in done.stderr
        assert path.exists()


def test_serve_with_two_worker_processes(tmp_path: Path, daemons: Daemons) -> None:
    daemon = daemons.start("--workers", "2", ATTACHSTORE_DATA_DIR=str(tmp_path / "data"))
    base = daemon.url
    refs = []
    for seed in range(6):  # several connections: both workers answer, from one store
        image = png(7, 7, seed=seed)
        body = json.dumps({"source": "user", "images": [{"data": base64.b64encode(image).decode()}]})
        request = urllib.request.Request(
            f"{base}/v1/attachments", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            refs.append((json.loads(r.read())["attachments"][0]["ref"], image))
    for ref, image in refs:
        with urllib.request.urlopen(f"{base}/v1/attachments/{ref}", timeout=30) as r:
            assert r.read() == image
    # Each worker keeps its samples in files of its own pid; /metrics on either sums them all.
    for _ in range(4):
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
            lines = r.read().decode().splitlines()
        assert 'attachstore_reads_total{result="ok"} 6.0' in lines
        assert "attachstore_images_admitted_total 6.0" in lines
    assert "with 2 worker(s)" in daemon.stop_cleanly()


@pytest.mark.parametrize("flags", [[], ["--workers", "1"]], ids=["default", "one"])
def test_serve_uses_one_worker_per_core_unless_told(
    tmp_path: Path, daemons: Daemons, flags: list[str]
) -> None:
    daemon = daemons.start(*flags, ATTACHSTORE_DATA_DIR=str(tmp_path / "data"))
    # Logged once every worker listens (the first may answer /readyz before the others do).
    until(lambda: "attachstore serving" in daemon.log.read_text(), "the serving line")
    expected = 1 if flags else cores()
    assert f"with {expected} worker(s)" in daemon.stop_cleanly()


def _serve_on_a_held_port(tmp_path: Path, *flags: str, reuse_port: bool = False) -> tuple[int, str]:
    with socket.socket() as other:
        if reuse_port:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env = {**os.environ, "ATTACHSTORE_DATA_DIR": str(tmp_path / "data")}
        done = subprocess.run(
            [sys.executable, "-m", "attachstore", "serve", "--listen", f"127.0.0.1:{port}", *flags],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    return port, done.stderr if done.returncode == 1 else f"exit {done.returncode}: {done.stderr}"


def test_serve_on_a_busy_port_names_the_address_and_how_to_choose_another(tmp_path: Path) -> None:
    port, err = _serve_on_a_held_port(tmp_path)
    assert err == (
        f"attachstore: cannot listen on 127.0.0.1:{port}: it is already in use (another attachstore, or "
        "another program, listens there). Stop the other program, or choose another address with "
        f"--listen HOST:PORT: `attachstore serve --listen 127.0.0.1:{port + 1}` "
        f'(`make run ARGS="--listen 127.0.0.1:{port + 1}"`)\n'
    )


def test_serve_with_workers_does_not_share_a_port_another_daemon_serves(tmp_path: Path) -> None:
    """SO_REUSEPORT would let the workers bind beside another `serve --workers` of the same user."""
    port, err = _serve_on_a_held_port(tmp_path, "--workers", "2", reuse_port=True)
    assert f"cannot listen on 127.0.0.1:{port}: it is already in use" in err
