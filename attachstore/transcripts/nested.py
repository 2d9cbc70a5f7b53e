"""JSON text held inside a string, read one stretch or escape at a time: whether an inner string is open, and
the key it is the value of. The scanner does the holding; this knows the inner text's grammar, and the keys
of both levels."""

from __future__ import annotations

KEY_MAX = 64  # the longest key remembered
# What followed the last string closed, which is a key once a ':' follows it.
NOT_KEY, AFTER_STRING, AFTER_COLON = -1, 0, 1
_GAP_MAX = 4096  # the most whitespace looked through between a key and its value
_WHITESPACE = b" \t\r\n"
_ESCAPED = {ord(k): v for k, v in {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.items()}
_ESCAPED |= {ord(c): c for c in '"\\/'}


class Nested:
    __slots__ = ("after", "escaping", "in_string", "key", "last", "opening", "text")

    def __init__(self) -> None:
        self.key: bytes | None = None  # the current inner string's key
        self.text: bytearray | None = None  # its text so far, while short enough to be a key
        self.in_string = False
        self.escaping = False  # an inner backslash waits for the character it escapes
        self.opening = False  # the inner string's first byte comes next
        self.last: bytes | None = None  # the last inner string closed, while short enough to be a key
        self.after = NOT_KEY

    def reset(self) -> None:
        self.in_string = self.escaping = self.opening = False
        self.last, self.after = None, NOT_KEY

    def run(self, data: bytes, pos: int, end: int) -> None:
        if not self.in_string:
            if self.after != NOT_KEY:
                self.after = after_step(self.after, data, pos, end)
            return
        self.escaping = False
        text = self.text
        if text is not None:
            self.text = text + data[pos:end] if len(text) + end - pos <= KEY_MAX else None

    def closes(self, char: str) -> bool:
        return self.in_string and char == '"' and not self.escaping

    def escape(self, char: str, closing: bool) -> None:
        if not self.in_string:
            if char == '"':
                self.in_string, self.escaping, self.opening = True, False, True
                self.key = self.last if self.after == AFTER_COLON else None
                self.last, self.after = None, NOT_KEY
                self.text = bytearray()
            elif char not in "\n\t\r":
                self.after = NOT_KEY
            return
        if closing:
            self.in_string = self.opening = False
            text = self.text
            self.last = None if text is None else bytes(text)
            self.after = AFTER_STRING
            return
        text = self.text  # the inner text as written: the escape's character
        if text is not None:
            encoded = char.encode("utf-8", "surrogatepass")
            self.text = text + encoded if len(text) + len(encoded) <= KEY_MAX else None
        self.escaping = not self.escaping and char == "\\"


def after_step(state: int, data: bytes, pos: int, end: int) -> int:
    if end - pos > _GAP_MAX:
        return NOT_KEY
    text = data[pos:end].strip(_WHITESPACE)
    if not text:
        return state
    return AFTER_COLON if state == AFTER_STRING and text == b":" else NOT_KEY


def decoded(raw: bytes) -> str:
    if raw[1] == ord("u"):
        try:
            return chr(int(raw[2:6], 16))
        except ValueError:
            return "?"
    return _ESCAPED.get(raw[1], "?")
