"""`attachstore mcp wrap -- python scripted_server.py SCRIPT` as a host runs it: every line passed on as it
came, both ways, except the answers to the host's tools/call and resources/read that carry images, whose
images go through the gate; and the server's stderr, exit code and signals passed on (docs/mcp.md, "Gate
another server")."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from attachstore.client import AsyncClient
from tests.support.daemon import Daemons
from tests.support.images import jpeg, png
from tests.support.mcp_server import PYTHON, configured, daemon_with_token

SERVER = Path(__file__).with_name("scripted_server.py")
ROUTES = """
[routes."vision"]
input_modalities = ["text", "image"]
[routes."small"]
input_modalities = ["text", "image"]
max_request_side = 16
[routes."one"]
input_modalities = ["text", "image"]
max_request_images = 1
"""
SHOT, PHOTO = png(40, 30), jpeg(60, 40)
NOTES = b"These are notes, not an image.\n"
WAIT = 60.0  # a safety net for a line that never comes, not a measure


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ref_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sides(data: str, mime: str | None = None) -> tuple[int, int]:
    """The sides of a base64 image, which is of the type `mime` says."""
    with Image.open(io.BytesIO(base64.b64decode(data))) as im:
        assert mime is None or im.get_format_mimetype() == mime
        return im.size


def request(id: Any, method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n"


def call(id: Any, tool: str) -> bytes:
    return request(id, "tools/call", name=tool, arguments={})


def answer(result: dict[str, Any]) -> str:
    """A script line answering the request with `result`."""
    return json.dumps({"jsonrpc": "2.0", "id": "$ID", "result": result}).replace('"$ID"', "$ID")


def image(data: bytes, mime: str = "image/png", **extra: Any) -> dict[str, Any]:
    return {"type": "image", "data": b64(data), "mimeType": mime, **extra}


def embedded(data: bytes, uri: str, mime: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "blob": b64(data)}}


@dataclass
class Ran:
    code: int
    out: list[bytes]  # the lines the host read, as they came
    err: str

    def answer(self, id: Any) -> dict[str, Any]:
        [found] = [m for line in self.out if isinstance(m := _json(line), dict) and m.get("id") == id]
        return found

    def result(self, id: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.answer(id)["result"]
        return result


def _json(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return configured(tmp_path, ROUTES)


@pytest.fixture
def scripted(tmp_path: Path) -> Any:
    """`scripted(answers, **more)`: the path of a script for scripted_server.py."""
    made = iter(range(1000))

    def make(answers: dict[str, list[str]], **more: Any) -> Path:
        path = tmp_path / f"script-{next(made)}.json"
        path.write_text(json.dumps({"answers": answers, **more}))
        return path

    return make


def wrapper(config: Path, script: Path, *options: str) -> list[str]:
    return [
        *PYTHON,
        "mcp",
        "wrap",
        "--config",
        str(config),
        *options,
        "--",
        sys.executable,
        str(SERVER),
        str(script),
    ]


def run(command: list[str], lines: list[bytes], env: dict[str, str] | None = None) -> Ran:
    """The host sends every line, closes its end, and reads everything until the wrapper exits."""
    done = subprocess.run(command, input=b"".join(lines), capture_output=True, timeout=120, env=env)
    return Ran(done.returncode, done.stdout.splitlines(keepends=True), done.stderr.decode())


def wrapped(config: Path, script: Path, lines: list[bytes], *options: str) -> Ran:
    return run(wrapper(config, script, "--route", "vision", *options), lines)


def holds(config: Path, session: str) -> list[str]:
    with sqlite3.connect(config.parent / "data" / "index.sqlite3") as db:
        return [
            r
            for (r,) in db.execute("SELECT ref FROM holds WHERE session = ? ORDER BY created_at", (session,))
        ]


# --- Transparency ---


def test_a_session_passes_byte_for_byte_but_the_result_with_an_image(
    config: Path, scripted: Any, tmp_path: Path
) -> None:
    """Every message type, both ways, each line as it was written: requests and notifications of the host,
    the server's own requests (sampling with an image in it, elicitation, roots) and the host's answers to
    them, unknown methods and fields, a future protocol version, batches, lines that are no JSON, CRLF, a
    last line without its newline, ids of both spaces alike. Only the tools/call answer with an image
    differs, and the server reads exactly what the host wrote."""
    shot = answer({"content": [{"type": "text", "text": "a shot"}, image(SHOT)], "isError": False})
    answers = {
        "initialize": [
            '{"id": $ID, "jsonrpc": "2.0", "result": {"protocolVersion": "2099-01-01", '
            '"capabilities": {"tools": {}, "resources": {}, "future": {"x": 1}}, '
            '"serverInfo": {"name": "scripted", "version": "0"}, "unknownField": [1, 2.50, null]}}'
        ],
        "notification notifications/initialized": [
            '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"é \\u00e9"}}',
            # The server's own request, with the id the host's tools/call will have: a separate space.
            '{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user",'
            f'"content":{json.dumps(image(SHOT))}}}],"maxTokens":5}}}}',
        ],
        "answer 7": ['{"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"message":"?"}}'],
        'answer "e1"': ['{"jsonrpc":"2.0","id":"r1","method":"roots/list"}'],
        'answer "r1"': ['{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'],
        "tools/list": [
            answer({"tools": [{"name": "shot", "inputSchema": {"type": "object"}, "x-extra": True}]}),
            "not json at all",
        ],
        "tools/call plain": [
            '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5}}',
            answer({"content": [{"type": "text", "text": "plain"}], "structuredContent": {"n": 1}}),
        ],
        "tools/call shot": [shot],
        # An image in an answer to anything but tools/call or resources/read goes on as it is.
        "prompts/get": [answer({"messages": [{"role": "user", "content": image(SHOT)}]})],
        "x/unknown": [
            '{"jsonrpc":"2.0","id":$ID,"error":{"code":-32601,"message":"no such method","data":{}}}'
        ],
        "ping": ['[{"jsonrpc":"2.0","id":$ID,"result":{}},{"jsonrpc":"2.0","method":"notifications/x"}]\r\n'],
        "resources/read file:///notes.txt": [
            answer({"contents": [{"uri": "file:///notes.txt", "mimeType": "text/plain", "text": "n"}]})
        ],
    }
    init = request(1, "initialize", protocolVersion="2099-01-01", capabilities={"roots": {}, "new": 1})
    init = init.replace(b'"params"', b'"unknownTop": {"a": [1]}, "params"')
    host = [
        init,
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        b'{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","content":{"type":"text","text":"hi"},'
        b'"model":"m"}}\n',  # the host's answer to the server's request 7
        b'{"jsonrpc":"2.0","id":"e1","result":{"action":"accept","content":{}}}\n',
        b'{"jsonrpc":"2.0","id":"r1","result":{"roots":[{"uri":"file:///p"}]}}\n',
        request(2, "tools/list"),
        call(3, "plain"),
        b"{oops\n",
        b"\n",
        call(7, "shot"),
        request("p", "prompts/get", name="p"),
        request(4, "x/unknown", whatever=[1, {"b": None}]),
        b'[{"jsonrpc":"2.0","id":5,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]\r\n',
        request(6, "resources/read", uri="file:///notes.txt"),
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}\n',
        b'{"jsonrpc":"2.0","id":8,"method":"ping"}',  # the last line, without its newline
    ]
    direct_received, wrapped_received = tmp_path / "direct.log", tmp_path / "wrapped.log"
    direct = run([sys.executable, str(SERVER), str(scripted(answers, received=str(direct_received)))], host)
    through = wrapped(config, scripted(answers, received=str(wrapped_received)), host)
    assert (direct.code, through.code) == (0, 0), through.err
    assert wrapped_received.read_bytes() == direct_received.read_bytes() == b"".join(host)
    [original] = [line for line in direct.out if line.startswith(b'{"jsonrpc": "2.0", "id": 7, "result"')]
    [changed_line] = [line for line in through.out if line not in direct.out]
    for a in direct.out:
        print("D", a[:70])
    for a in through.out:
        print("W", a[:70])
    assert [line for line in through.out if line != changed_line] == [
        line for line in direct.out if line != original
    ]
    changed = json.loads(changed_line)
    assert changed["result"]["content"][1]["data"] == b64(SHOT)  # admitted, and passed on as stored
    assert changed["result"]["content"][2]["text"].startswith(f"{ref_of(SHOT)}, stored by attachstore")


def test_a_servers_request_with_the_id_of_a_pending_call_is_not_its_answer(
    config: Path, scripted: Any
) -> None:
    """The server's requests number in a space of their own: one that shares the id of the host's pending
    tools/call, and carries an image, goes on as it came, and the answer that follows is the one gated."""
    sampling = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "sampling/createMessage",
            "params": {"messages": [{"role": "user", "content": image(NOTES)}], "maxTokens": 5},
        }
    )
    script = scripted({"tools/call shot": [sampling, answer({"content": [image(SHOT)]})]})
    ran = wrapped(config, script, [call(7, "shot")])
    assert ran.code == 0, ran.err
    request_line, answer_line = ran.out
    assert request_line == sampling.encode() + b"\n"
    assert json.loads(answer_line)["result"]["content"][1]["text"].startswith(ref_of(SHOT))


# --- Images admitted ---


def test_an_admitted_image_is_what_the_route_takes_with_its_ref_beside_it(
    config: Path, scripted: Any
) -> None:
    result = {
        "content": [
            {"type": "text", "text": "before"},
            image(SHOT, annotations={"audience": ["user"]}, _meta={"k": 1}),
            {"type": "text", "text": "after"},
        ],
        "structuredContent": {"width": 40},
        "isError": False,
        "_meta": {"m": True},
        "futureField": 1,
    }
    script = scripted({"tools/call shot": [answer(result)]})
    ran = run(wrapper(config, script, "--route", "small", "--session", "s-1"), [call(1, "shot")])
    assert ran.code == 0, ran.err
    got = ran.result(1)
    assert list(got) == list(result)  # every key, in its place
    assert {k: v for k, v in got.items() if k != "content"} == {
        k: v for k, v in result.items() if k != "content"
    }
    before, shown, text, after = got["content"]
    assert (before, after) == (result["content"][0], result["content"][2])
    assert list(shown) == ["type", "data", "mimeType", "annotations", "_meta"]
    assert (shown["annotations"], shown["_meta"]) == ({"audience": ["user"]}, {"k": 1})
    assert sides(shown["data"], shown["mimeType"]) == (16, 12)  # the route's request variant
    assert text == {
        "type": "text",
        "text": f"{ref_of(SHOT)}, stored by attachstore: image/png, 40x30, {len(SHOT):,} bytes. "
        "Shown here at 16x12, within the model's request limits.",
    }
    assert holds(config, "s-1") == [ref_of(SHOT)]


def test_embedded_image_resources_are_gated_and_others_left_as_they_are(config: Path, scripted: Any) -> None:
    pdf = embedded(b"%PDF-1.4\n", "file:///a.pdf", "application/pdf")
    text = {"type": "resource", "resource": {"uri": "file:///n.txt", "mimeType": "text/plain", "text": "n"}}
    result = {"content": [embedded(PHOTO, "file:///photo.jpg", "image/jpeg"), pdf, text]}
    ran = wrapped(config, scripted({"tools/call shot": [answer(result)]}), [call(1, "shot")])
    assert ran.code == 0, ran.err
    photo, said, *rest = ran.result(1)["content"]
    assert photo == result["content"][0]  # stored byte for byte, and the route takes it as it is
    assert said["text"].startswith(f"{ref_of(PHOTO)}, stored by attachstore: image/jpeg, 60x40,")
    assert rest == [pdf, text]


def test_the_images_of_a_resources_read_are_gated_each_keeping_its_uri(config: Path, scripted: Any) -> None:
    contents = [
        {"uri": "file:///n.txt", "mimeType": "text/plain", "text": "n"},
        {"uri": "file:///shot.png", "mimeType": "image/png", "blob": b64(SHOT), "_meta": {"k": 1}},
        {"uri": "file:///a.pdf", "mimeType": "application/pdf", "blob": b64(b"%PDF-1.4\n")},
    ]
    script = scripted({"resources/read file:///shot.png": [answer({"contents": contents})]})
    ran = run(
        wrapper(config, script, "--route", "small"), [request(1, "resources/read", uri="file:///shot.png")]
    )
    assert ran.code == 0, ran.err
    text, shot, said, pdf = ran.result(1)["contents"]
    assert (text, pdf) == (contents[0], contents[2])
    assert list(shot) == ["uri", "mimeType", "blob", "_meta"]
    assert sides(shot["blob"], shot["mimeType"]) == (16, 12)
    assert said["uri"] == "file:///shot.png"
    assert said["mimeType"] == "text/plain"
    assert said["text"].startswith(f"{ref_of(SHOT)}, stored by attachstore")


def test_past_the_routes_request_budget_the_oldest_images_become_text(config: Path, scripted: Any) -> None:
    result = {"content": [image(SHOT), image(PHOTO, "image/jpeg")]}
    script = scripted({"tools/call two": [answer(result)]})
    ran = run(wrapper(config, script, "--route", "one"), [call(1, "two")])
    assert ran.code == 0, ran.err
    left_out, photo, said = ran.result(1)["content"]
    assert left_out["type"] == "text"
    assert left_out["text"].startswith("[image omitted to keep the request within its image limits")
    assert f"attachstore holds it as {ref_of(SHOT)}: image/png, 40x30" in left_out["text"]
    assert photo["data"] == b64(PHOTO)
    assert said["text"].startswith(ref_of(PHOTO))


def test_the_session_is_named_after_the_command_and_holds_the_images(config: Path, scripted: Any) -> None:
    ran = wrapped(
        config, scripted({"tools/call shot": [answer({"content": [image(SHOT)]})]}), [call(1, "shot")]
    )
    assert ran.code == 0, ran.err
    with sqlite3.connect(config.parent / "data" / "index.sqlite3") as db:
        [(session, route, ttl)] = db.execute("SELECT id, route, ttl FROM sessions").fetchall()
    name = Path(sys.executable).name
    assert session.startswith(f"wrap-{name}-")
    assert len(session) == len(f"wrap-{name}-") + 8
    assert (route, ttl) == ("vision", 30 * 86400)  # [mcp] session_ttl's default: it expires when idle
    assert holds(config, session) == [ref_of(SHOT)]


async def test_on_a_daemon_the_images_are_admitted_into_the_tokens_session(
    config: Path, scripted: Any, tmp_path: Path, daemons: Daemons
) -> None:
    token = "ast_wrap-test-token"
    url = daemon_with_token(daemons, tmp_path / "daemon-data", token, ROUTES)
    result = {"content": [image(SHOT), embedded(PHOTO, "file:///photo.jpg", "image/jpeg")]}
    command = wrapper(config, scripted({"tools/call shot": [answer(result)]}), "--url", url)
    command[command.index("--") : command.index("--")] = ["--route", "small", "--session", "remote-1"]
    ran = run(command, [call(1, "shot")], env={"PATH": "/usr/bin:/bin", "ATTACHSTORE_TOKEN": token})
    assert ran.code == 0, ran.err
    shot, said, photo, said_too = ran.result(1)["content"]
    assert sides(shot["data"], shot["mimeType"]) == (16, 11) or sides(shot["data"], shot["mimeType"]) == (
        16,
        12,
    )
    assert said["text"].startswith(ref_of(SHOT))
    assert photo["resource"]["uri"] == "file:///photo.jpg"
    assert said_too["text"].startswith(ref_of(PHOTO))
    async with AsyncClient(url, token=token) as store:
        session = await store.get_session("remote-1")
    assert (session.route, session.holds) == ("small", [ref_of(SHOT), ref_of(PHOTO)])


def test_tasks_result_is_gated_as_the_tool_result_it_carries(config: Path, scripted: Any) -> None:
    script = scripted({"tasks/result": [answer({"content": [image(NOTES)], "_meta": {"task": "t1"}})]})
    ran = wrapped(config, script, [request(1, "tasks/result", taskId="t1")])
    [said] = ran.result(1)["content"]
    assert "(UNSUPPORTED_IMAGE_TYPE)" in said["text"]
    assert ran.result(1)["_meta"] == {"task": "t1"}


def test_structured_content_is_dropped_for_hosts_that_would_show_nothing_else(
    config: Path, scripted: Any
) -> None:
    """Claude Code and Codex show the model structuredContent in place of the content (a server's copy of its
    image as base64 text, and no ref): with --structured auto a changed result loses it, also where the tool
    declared an outputSchema (Claude Code takes the result without it: tests/interop/hosts)."""
    tools = {
        "tools": [
            {"name": "free", "inputSchema": {"type": "object"}},
            {"name": "typed", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}},
        ]
    }
    result = answer({"content": [image(SHOT)], "structuredContent": {"n": 1}})
    script = scripted(
        {"tools/list": [answer(tools)], "tools/call free": [result], "tools/call typed": [result]}
    )

    def session(client: str, *options: str) -> tuple[bool, bool]:
        init = request(
            0, "initialize", protocolVersion="2025-11-25", capabilities={}, clientInfo={"name": client}
        )
        ran = wrapped(
            config, script, [init, request(1, "tools/list"), call(2, "free"), call(3, "typed")], *options
        )
        assert ran.code == 0, ran.err
        return "structuredContent" in ran.result(2), "structuredContent" in ran.result(3)

    assert session("claude-code") == (False, False)
    assert session("codex-mcp-client") == (False, False)
    assert session("gemini-cli-mcp-client") == (True, True)
    assert session("claude-code", "--structured", "always") == (True, True)
    assert session("gemini-cli-mcp-client", "--structured", "never") == (False, False)


# --- Refused ---


def test_a_text_file_named_png_turns_the_results_images_into_text(config: Path, scripted: Any) -> None:
    result = {
        "content": [
            {"type": "text", "text": "two files"},
            image(SHOT),
            image(NOTES, _meta={"name": "notes.png"}),
            {"type": "text", "text": "end"},
        ],
        "isError": False,
    }
    ran = wrapped(config, scripted({"tools/call two": [answer(result)]}), [call(1, "two")])
    assert ran.code == 0, ran.err
    got = ran.result(1)
    assert got["isError"] is False  # the call still succeeds
    first, said, last = got["content"]
    assert (first, last) == (result["content"][0], result["content"][3])
    assert said["type"] == "text"
    assert said["text"].startswith("The tool result contained 2 images, but none were attached.")
    assert "Image 1 was valid but was not attached" in said["text"]
    assert "(UNSUPPORTED_IMAGE_TYPE)" in said["text"]


def test_an_oversize_image_with_oversize_reject_is_refused_as_text(tmp_path: Path, scripted: Any) -> None:
    config = configured(tmp_path, ROUTES)
    config.write_text(
        config.read_text().replace("[admission]\n", '[admission]\noversize = "reject"\n')
        + "[limits]\nmax_side = 100\n"
    )
    ran = wrapped(
        config, scripted({"tools/call wide": [answer({"content": [image(png(150, 10))]})]}), [call(1, "wide")]
    )
    assert ran.code == 0, ran.err
    [said] = ran.result(1)["content"]
    assert said["text"] == (
        "The tool result contained an image, but it was not attached: the limit is 100 pixels a side and "
        "this image is 150x10; shrink it to at most 100x6 and read it again (IMAGE_DIMENSION_TOO_LARGE)."
    )


def test_without_a_route_that_takes_images_every_image_is_refused(config: Path, scripted: Any) -> None:
    script = scripted(
        {
            "resources/read file:///s.png": [
                answer({"contents": [{"uri": "file:///s.png", "mimeType": "image/png", "blob": b64(SHOT)}]})
            ]
        }
    )
    ran = run(wrapper(config, script), [request(1, "resources/read", uri="file:///s.png")])  # no --route
    [entry] = ran.result(1)["contents"]
    assert list(entry) == ["uri", "mimeType", "text"]
    assert entry["mimeType"] == "text/plain"
    assert "(MODALITY_UNSUPPORTED)" in entry["text"]


def test_a_malformed_image_block_is_refused_as_text(config: Path, scripted: Any) -> None:
    result = {
        "content": [{"type": "image", "data": 5, "mimeType": "image/png"}, {"type": "text", "text": "x"}]
    }
    ran = wrapped(config, scripted({"tools/call bad": [answer(result)]}), [call(1, "bad")])
    said, text = ran.result(1)["content"]
    assert said["text"] == (
        "The tool result contained an image, but it was not attached: the server's answer is malformed at "
        "$.content[0].data: Expected `str`, got `int`."
    )
    assert text == result["content"][1]


# --- The store cannot answer ---


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_store_that_cannot_be_reached_turns_the_images_into_text(config: Path, scripted: Any) -> None:
    result = {"content": [image(SHOT), {"type": "text", "text": "x"}]}
    script = scripted({"tools/call shot": [answer(result)]})
    ran = wrapped(config, script, [call(1, "shot")], "--url", f"http://127.0.0.1:{closed_port()}")
    assert ran.code == 0, ran.err
    said, text = ran.result(1)["content"]
    assert said["text"].startswith(
        "The tool result contained an image, but it was not checked: the attachstore daemon is not "
        "reachable ("
    )
    assert said["text"].endswith("); tell the user.")
    assert text == result["content"][1]


def test_unsafe_pass_images_passes_them_unchecked_when_the_store_cannot_be_reached(
    config: Path, scripted: Any
) -> None:
    line = answer({"content": [image(NOTES)]})
    url = f"http://127.0.0.1:{closed_port()}"
    ran = wrapped(
        config, scripted({"tools/call shot": [line]}), [call(1, "shot")], "--url", url, "--unsafe-pass-images"
    )
    assert ran.code == 0, ran.err
    assert ran.out == [line.replace("$ID", "1").encode() + b"\n"]
    assert "passed on unchecked" in ran.err


# --- Batches ---


def test_an_image_answer_in_a_batch_is_gated_and_the_rest_of_the_batch_left_as_it_is(
    config: Path, scripted: Any
) -> None:
    pair = json.dumps(
        [
            {"jsonrpc": "2.0", "id": 6, "result": {}},
            {"jsonrpc": "2.0", "id": 5, "result": {"content": [image(SHOT)]}},
            {"jsonrpc": "2.0", "method": "notifications/x", "params": {"z": 1, "a": 2}},
        ]
    )
    script = scripted({"tools/call pair": [pair], "ping": []})
    batch = b"[" + call(5, "pair").strip() + b"," + request(6, "ping").strip() + b"]\n"
    ran = wrapped(config, script, [batch])
    assert ran.code == 0, ran.err
    [line] = ran.out
    first, second, third = json.loads(line)
    assert (first, third) == tuple(json.loads(pair)[i] for i in (0, 2))
    assert list(third["params"]) == ["z", "a"]
    assert second["result"]["content"][1]["text"].startswith(ref_of(SHOT))


# --- Order ---


class Hanging:
    """A daemon that takes connections and answers none until `release()`, then drops them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.released = threading.Event()
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        held = []
        self.sock.settimeout(0.05)
        while not self.released.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            held.append(conn)
            self.connected.set()
        for conn in held:
            conn.close()
        self.sock.close()

    def release(self) -> None:
        self.released.set()
        self.thread.join()


@pytest.fixture
def hanging() -> Iterator[Hanging]:
    daemon = Hanging()
    yield daemon
    daemon.release()


def read_line(proc: subprocess.Popen[bytes]) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], WAIT)
    assert ready, "no line from the wrapper"
    return proc.stdout.readline()


def test_a_result_being_gated_holds_no_other_line(config: Path, scripted: Any, hanging: Hanging) -> None:
    script = scripted(
        {
            "tools/call shot": [
                answer({"content": [image(SHOT)]}),
                '{"jsonrpc":"2.0","method":"notifications/after"}',
            ],
            "tools/call plain": [answer({"content": [{"type": "text", "text": "plain"}]})],
        }
    )
    command = wrapper(config, script, "--route", "vision", "--url", hanging.url)
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None
        proc.stdin.write(call(1, "shot"))
        proc.stdin.flush()
        assert json.loads(read_line(proc)) == {"jsonrpc": "2.0", "method": "notifications/after"}
        proc.stdin.write(call(2, "plain"))  # answered while the first is still being gated
        proc.stdin.flush()
        assert json.loads(read_line(proc))["id"] == 2
        assert hanging.connected.is_set()
        hanging.release()
        gated = json.loads(read_line(proc))
        assert gated["id"] == 1
        assert "not checked" in gated["result"]["content"][0]["text"]
        proc.stdin.close()
        assert proc.wait(WAIT) == 0


# --- The process ---


def test_the_servers_stderr_and_exit_code_are_the_wrappers(config: Path, scripted: Any) -> None:
    ran = wrapped(config, scripted({}, stderr="the server says hello\n", exit=5), [request(1, "ping")])
    assert ran.code == 5
    assert "the server says hello\n" in ran.err
    assert ran.out == [b'{"jsonrpc": "2.0", "id": 1, "result": {}}\n']


def test_a_server_that_exits_ends_the_wrapper_with_its_code(config: Path, scripted: Any) -> None:
    exits = request(2, "tools/call", name="exit", arguments={"code": 7})
    command = wrapper(config, scripted({}), "--route", "vision")
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None
        proc.stdin.write(request(1, "ping") + exits)  # and stdin stays open
        proc.stdin.flush()
        assert proc.wait(WAIT) == 7
        assert proc.stdout is not None
        assert proc.stdout.read() == b'{"jsonrpc": "2.0", "id": 1, "result": {}}\n'


def test_a_server_killed_by_a_signal_is_128_plus_the_signal(config: Path, scripted: Any) -> None:
    kill = request(1, "tools/call", name="signal", arguments={"signal": int(signal.SIGKILL)})
    assert wrapped(config, scripted({}), [kill]).code == 128 + signal.SIGKILL


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_wrapper_reaches_the_server(config: Path, scripted: Any, signum: int) -> None:
    bye = '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"SIGTERM"}}'
    script = scripted({"SIGTERM": [bye]})
    command = wrapper(config, script, "--route", "vision")
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None
        proc.stdin.write(request(1, "ping"))  # the server is up once it answers
        proc.stdin.flush()
        read_line(proc)
        proc.send_signal(signum)
        code = proc.wait(WAIT)
        assert proc.stdout is not None
        rest = proc.stdout.read()
    if signum == signal.SIGTERM:  # the server writes its last line and exits 3
        assert (code, rest) == (3, bye.encode() + b"\n")
    else:  # Python's default for SIGINT in the server: KeyboardInterrupt, exit 1 (130 if it died of it)
        assert code in (1, 128 + signal.SIGINT)


def test_a_server_that_ignores_sigterm_is_killed(config: Path, scripted: Any) -> None:
    command = wrapper(config, scripted({}, ignore_sigterm=True), "--route", "vision")
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None
        proc.stdin.write(request(1, "ping"))
        proc.stdin.flush()
        read_line(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 128 + signal.SIGKILL


def test_the_servers_environment_is_the_wrappers_without_the_token(
    config: Path, scripted: Any, tmp_path: Path
) -> None:
    dumped = tmp_path / "env.json"
    env_server = tmp_path / "env_server.py"
    env_server.write_text(f"import json, os\njson.dump(dict(os.environ), open({str(dumped)!r}, 'w'))\n")
    command = [*PYTHON, "mcp", "wrap", "--config", str(config), "--", sys.executable, str(env_server)]
    env = {"PATH": "/usr/bin:/bin", "ATTACHSTORE_TOKEN": "secret", "OTHER": "kept"}
    ran = run(command, [], env=env)
    assert ran.code == 0, ran.err
    seen = json.loads(dumped.read_text())
    assert seen["OTHER"] == "kept"
    assert "ATTACHSTORE_TOKEN" not in seen


def test_a_command_that_does_not_exist_is_127(config: Path, tmp_path: Path) -> None:
    command = [*PYTHON, "mcp", "wrap", "--config", str(config), "--", str(tmp_path / "missing")]
    ran = run(command, [])
    assert ran.code == 127
    assert "cannot start" in ran.err


def test_no_command_is_a_usage_error(config: Path) -> None:
    ran = run([*PYTHON, "mcp", "wrap", "--config", str(config), "--route", "vision"], [])
    assert ran.code == 2
    assert "name the server to start after --" in ran.err
