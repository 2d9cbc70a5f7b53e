"""The streaming scanner: the bytes come out as they went in, whatever the chunks; it hands over exactly the
strings that a parser of the whole text finds wanted, at both levels, with their keys and lines; torn lines,
cut escapes and overlong strings are passed through."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attachstore.gate import sniff
from attachstore.transcripts.inline import Finder, Placeholders
from attachstore.transcripts.policy import Found, Policy
from attachstore.transcripts.scanner import Scanner
from tests.support.images import png

PNG_B64 = base64.b64encode(png(6, 4, seed=9)).decode()
KEYS = frozenset({b"data"})


def scan(text: bytes, policy: Policy, sizes: list[int] | None = None) -> tuple[bytes, list[Found]]:
    """Feed `text` in chunks of the given sizes (cycled), or whole; the bytes out and what was handed over."""
    scanner = Scanner(policy)
    events = []
    pos, i = 0, 0
    while pos < len(text):
        n = len(text) if not sizes else sizes[i % len(sizes)]
        events += scanner.feed(text[pos : pos + n])
        pos, i = pos + n, i + 1
    events += scanner.end()
    out = b"".join(e.raw if isinstance(e, Found) else bytes(e) for e in events)
    return out, [e for e in events if isinstance(e, Found)]


def _text(raw: bytes | None) -> str | None:
    """A string's content as written, decoded."""
    return None if raw is None else str(json.loads(b'"' + raw + b'"'))


def summary(found: list[Found]) -> list[tuple[Any, ...]]:
    return [(f.raw, f.level, f.key, f.line, f.complete, f.reason) for f in found]


# -- what a parser of the whole text finds -----------------------------------------------------------------


def _wanted(value: str, key: str | None) -> bool:
    if value.startswith("attachstore:") or value[:11].lower() == "data:image/":
        return True
    if key is None or key.encode() not in KEYS or len(value) < 16:
        return False
    head = value[:16]
    if not all(c.isalnum() or c in "+/" for c in head):
        return False
    return sniff(base64.b64decode(head)) is not None


def expected(line: str, number: int) -> list[tuple[int, str | None, str, int]]:
    """(level, key, value, line) of every wanted string, in document order."""
    out: list[tuple[int, str | None, str, int]] = []

    def walk(node: Any, level: int, key: str | None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, level, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, level, None)
        elif isinstance(node, str):
            if level == 0 and node[:1] in ("[", "{"):
                try:
                    inner = json.loads(node)
                except ValueError:
                    return
                walk(inner, 1, None)
            elif _wanted(node, key):
                out.append((level, key, node, number))

    walk(json.loads(line), 0, None)
    return out


# -- generated documents -----------------------------------------------------------------------------------

texts = st.sampled_from(
    [
        "",
        "plain",
        'a "quoted" word',
        "back\\slash",
        "line\nbreak\ttab",
        "é ü 🙂",
        "data:image/png;base64," + PNG_B64,
        "DATA:IMAGE/PNG;BASE64," + PNG_B64,
        "data:text/plain;base64,aGk=",
        "attachstore:sha256:" + "ab" * 32,
        PNG_B64,
        "iVBOR",
        "data",
        "[not json",
    ]
)
keys = st.sampled_from(["data", "type", "text", "image_url", "d\u00e9j\u00e0"])
scalars = st.one_of(texts, st.integers(-5, 5), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=12,
)
nested = values.map(lambda v: json.dumps(v if isinstance(v, list | dict) else [v]))
records = st.dictionaries(keys, st.one_of(values, nested), min_size=1, max_size=5)


def write(record: Any, style: int) -> str:
    if style == 0:
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    if style == 1:
        return json.dumps(record)
    return json.dumps(record, indent=1).replace("\n", " ").replace("/", "\\/")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(records, st.integers(0, 2)), min_size=1, max_size=4), st.randoms())
def test_chunks_change_nothing_and_the_strings_are_those_a_parser_finds(
    lines: list[tuple[Any, int]], rng: random.Random
) -> None:
    text = "".join(write(r, style) + "\n" for r, style in lines)
    data = text.encode()
    policy = Finder(KEYS, cap=1 << 20)
    whole, found = scan(data, policy)
    assert whole == data
    want = [e for i, line in enumerate(text.splitlines(), 1) for e in expected(line, i)]
    got = [(f.level, _text(f.key), _text(f.raw), f.line) for f in found]
    assert got == want
    assert all(f.complete for f in found)
    for _ in range(3):
        sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 5))]
        out, again = scan(data, policy, sizes)
        assert out == data
        assert summary(again) == summary(found)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(1, 7), min_size=1, max_size=4))
def test_any_bytes_come_out_unchanged(noise: bytes, sizes: list[int]) -> None:
    # Quotes, backslashes and newlines thrown into JSON-looking text, in every chunking.
    data = b'{"data":"' + PNG_B64.encode() + b'","x":"[\\"' + noise + b'"}\n' + noise
    for policy in (Finder(KEYS, cap=64), Placeholders()):
        whole, found = scan(data, policy)
        out, again = scan(data, policy, sizes)
        assert whole == out == data
        assert [(f.level, f.key, f.line, f.complete) for f in again] == [
            (f.level, f.key, f.line, f.complete) for f in found
        ]


def test_the_key_is_the_one_right_before_the_value() -> None:
    text = (
        '{"data" :\t"' + PNG_B64 + '", "other": "' + PNG_B64 + '", "data": ["' + PNG_B64 + '"], '
        '"data": {"x": 1}, "y": "' + PNG_B64 + '"}\n'
    ).encode()
    _, found = scan(text, Finder(KEYS, cap=1 << 20))
    assert [f.key for f in found] == [b"data"]


def test_torn_lines_are_passed_through_and_the_next_line_read_afresh() -> None:
    url = b"data:image/png;base64," + PNG_B64.encode()
    text = b'{"a":"' + url[:30] + b"\n" + b'{"b":"' + url + b'"}\n{"c":"x\\\n'
    for sizes in (None, [1], [3, 7]):
        out, found = scan(text, Finder(KEYS, cap=1 << 20), sizes)
        assert out == text
        assert summary(found) == [
            (url[:30], 0, b"a", 1, False, "torn"),
            (url, 0, b"b", 2, True, None),
        ]


def test_a_string_past_the_cap_is_handed_over_cut_and_the_rest_passed_through() -> None:
    url = b"data:image/png;base64," + PNG_B64.encode()
    text = b'["' + url + b'","' + url[:40] + b'"]'
    out, found = scan(text, Finder(KEYS, cap=50))
    assert out == text
    assert [(f.complete, f.reason) for f in found] == [(False, "cap"), (True, None)]
    assert url.startswith(found[0].raw)
    assert len(found[0].raw) > 50


def test_inside_json_text_quotes_are_escaped_and_an_inner_escape_ends_nothing() -> None:
    inner = json.dumps([{"type": "image", "data": PNG_B64}, 'say \\"data:image/png;base64,AAAA\\"'])
    text = json.dumps({"output": inner}, separators=(",", ":")).encode()
    out, found = scan(text, Finder(KEYS, cap=1 << 20), [5])
    assert out == text
    assert [(f.raw, f.level, f.key) for f in found] == [(PNG_B64.encode(), 1, b"data")]


def test_restore_policy_hands_over_only_placeholders() -> None:
    ref = "sha256:" + "cd" * 32
    text = json.dumps({"a": "attachstore:" + ref, "b": "attachstore", "c": "data:image/png;base64,AAAA"})
    _, found = scan(text.encode(), Placeholders(), [2])
    assert [f.raw for f in found] == [b"attachstore:" + ref.encode()]
