"""JSON text parsed into values that know where they are, so that repair can replace one value (an image
part, a media type) and leave every other byte as it was written. For one record (a JSONL line) or one
document at a time."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STRING = re.compile(rb'"([^"\\\n]*(?:\\.[^"\\\n]*)*)"')
_SCALAR = re.compile(rb"-?[0-9][0-9eE.+-]*|true|false|null")
_WS = re.compile(rb"[ \t\r\n]*")
_DEPTH = 200


class NotJson(ValueError): ...


@dataclass(eq=False)
class Value:
    kind: str  # "object", "array", "string", "scalar"
    start: int  # the value's first byte (a quote, a brace)
    end: int  # one past its last
    parent: Value | None = None
    key: bytes | None = None  # its key in the parent object, as written
    members: list[Value] = field(default_factory=list)

    def raw(self, text: bytes) -> bytes:
        # A string's content between its quotes, as written.
        return text[self.start + 1 : self.end - 1] if self.kind == "string" else text[self.start : self.end]

    def get(self, key: bytes) -> Value | None:
        return next((m for m in self.members if m.key == key), None)

    def strings(self) -> list[Value]:
        found: list[Value] = []
        stack = [self]
        while stack:
            v = stack.pop()
            if v.kind == "string":
                found.append(v)
            stack.extend(reversed(v.members))
        return found


def parse(text: bytes) -> Value:
    value, end = _value(text, _skip(text, 0), None, None, 0)
    if _skip(text, end) != len(text):
        raise NotJson("text after the JSON value")
    return value


def _skip(text: bytes, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _value(text: bytes, pos: int, parent: Value | None, key: bytes | None, depth: int) -> tuple[Value, int]:
    if depth > _DEPTH:
        raise NotJson("nested too deep")
    if pos >= len(text):
        raise NotJson("the text ends before a value")
    c = text[pos]
    if c == 0x22:
        match = _STRING.match(text, pos)
        if match is None:
            raise NotJson(f"a string at {pos} does not end")
        return Value("string", pos, match.end(), parent, key), match.end()
    if c in b"{[":
        value = Value("object" if c == 0x7B else "array", pos, pos, parent, key)
        close = 0x7D if c == 0x7B else 0x5D
        pos = _skip(text, pos + 1)
        if pos < len(text) and text[pos] == close:
            value.end = pos + 1
            return value, pos + 1
        while True:
            member_key = None
            if value.kind == "object":
                match = _STRING.match(text, pos)
                if match is None:
                    raise NotJson(f"a key expected at {pos}")
                member_key = match.group(1)
                pos = _skip(text, match.end())
                if pos >= len(text) or text[pos] != 0x3A:
                    raise NotJson(f"':' expected at {pos}")
                pos = _skip(text, pos + 1)
            member, pos = _value(text, pos, value, member_key, depth + 1)
            value.members.append(member)
            pos = _skip(text, pos)
            if pos < len(text) and text[pos] == 0x2C:
                pos = _skip(text, pos + 1)
                continue
            if pos < len(text) and text[pos] == close:
                value.end = pos + 1
                return value, pos + 1
            raise NotJson(f"',' or a closing bracket expected at {pos}")
    match = _SCALAR.match(text, pos)
    if match is None:
        raise NotJson(f"a value expected at {pos}")
    return Value("scalar", pos, match.end(), parent, key), match.end()


def removal(text: bytes, value: Value) -> tuple[int, int]:
    """The span to cut to remove an array's element with one of the commas beside it."""
    parent = value.parent
    if parent is None or parent.kind != "array":
        raise ValueError("only an array's element is removed")
    i = parent.members.index(value)
    if i > 0:
        return parent.members[i - 1].end, value.end
    if len(parent.members) > 1:
        return value.start, parent.members[1].start
    return value.start, value.end


def apply(text: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """`text` with each span replaced; a span inside another one being replaced is dropped."""
    out: list[bytes] = []
    at = 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], -e[1])):
        if start < at:
            continue
        out += [text[at:start], new]
        at = end
    out.append(text[at:])
    return b"".join(out)
