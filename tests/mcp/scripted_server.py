"""A stdio MCP server that speaks raw JSON-RPC lines from a script, for `attachstore mcp wrap` to stand in
front of: `python scripted_server.py SCRIPT.json`. Every line it reads is appended, as it came, to the
script's `received` file; for each message it writes the script's lines for it, as they are written there.

The script: {"received": PATH, "stderr": TEXT, "exit": CODE, "answers": {KEY: [LINE, ...]}}, where KEY is
a request's method, `tools/call NAME`, `resources/read URI`, `answer ID` (the client's answer to a request
of the server's, by the id's JSON), or `notification METHOD`. In each line, $ID is the request's id as JSON.
A request with no lines in the script is answered with an empty result. The tool `exit` exits with
`arguments.code` at once; `signal` sends the server `arguments.signal`. On SIGTERM the server writes the
script's `answers["SIGTERM"]` lines and exits 3, unless the script says `"ignore_sigterm": true`. At the end
of its input it exits with `exit` (default 0)."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def main() -> int:
    with open(sys.argv[1]) as f:
        script: dict[str, Any] = json.load(f)
    answers: dict[str, list[str]] = script.get("answers", {})
    out = sys.stdout.buffer

    def write(lines: list[str], id: Any = None) -> None:
        for line in lines:
            out.write(line.replace("$ID", json.dumps(id)).encode())
            if not line.endswith("\n"):
                out.write(b"\n")
        out.flush()

    def on_sigterm(signum: int, frame: object) -> None:
        write(answers.get("SIGTERM", []))
        os._exit(3)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if script.get("ignore_sigterm") else on_sigterm)
    if "stderr" in script:
        sys.stderr.write(script["stderr"])
        sys.stderr.flush()
    with open(script.get("received", os.devnull), "ab", buffering=0) as received:
        for line in sys.stdin.buffer:
            received.write(line)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            for m in message if isinstance(message, list) else [message]:
                if isinstance(m, dict):
                    answer(m, answers, write)
    return int(script.get("exit", 0))


def answer(m: dict[str, Any], answers: dict[str, list[str]], write: Any) -> None:
    method, params = m.get("method"), m.get("params") or {}
    if method is None:
        write(answers.get(f"answer {json.dumps(m.get('id'))}", []))
        return
    if "id" not in m:
        write(answers.get(f"notification {method}", []))
        return
    if method == "tools/call" and params.get("name") == "exit":
        sys.stdout.flush()
        os._exit(params["arguments"]["code"])
    if method == "tools/call" and params.get("name") == "signal":
        os.kill(os.getpid(), params["arguments"]["signal"])
        return
    key = method
    if method == "tools/call":
        key = f"tools/call {params.get('name')}"
    elif method == "resources/read":
        key = f"resources/read {params.get('uri')}"
    write(answers.get(key, ['{"jsonrpc": "2.0", "id": $ID, "result": {}}']), m["id"])


if __name__ == "__main__":
    sys.exit(main())
