"""JSON nested deeper than the interpreter recurses. msgspec recurses once per level, decoding and encoding;
the only free-form JSON in a request is a render's tool-call arguments, which are encoded again into the
answer."""

from __future__ import annotations

from typing import Any

import pytest

LEVELS = [
    940,  # decoded, then too deep for the encoder of the answer: a 500 (anthropic, gemini), or an answer
    100_000,  # too deep to decode: a 500 from the decoder
]


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize("levels", LEVELS)
@pytest.mark.parametrize("provider", ["openai-chat", "anthropic", "gemini"])
def test_deep_tool_call_arguments_are_a_bad_request(start_daemon: Any, levels: int, provider: str) -> None:
    daemon = start_daemon()
    before = daemon.peak_rss()
    call = f'{{"id": "c1", "name": "f", "arguments": {deep(levels)}}}'
    body = (
        f'{{"provider": "{provider}", "messages": [{{"role": "user", "content": "hi"}}, '
        f'{{"role": "assistant", "content": "ok", "tool_calls": [{call}]}}]}}'
    )
    status, answer = daemon.post("mallory", "/v1/render", body.encode())
    assert (status, answer["error"]["code"]) == (400, "INVALID_REQUEST")
    assert "nested" in answer["error"]["message"]
    assert "Traceback" not in daemon.log.read_text()
    assert daemon.peak_rss() - before < 64 * 1024 * 1024  # a 16 MiB render body at most, and its decoding
    daemon.assert_alice_is_served()
