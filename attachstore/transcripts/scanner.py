"""The streaming scanner under strip and restore: JSON text in as raw bytes, the same bytes out, except that
the strings a policy wants are handed over whole, as written, to be replaced or kept.

It reads the bytes once, in chunks, and never holds a line: what it holds is one wanted string (at most the
policy's `cap`), a chunk, and a few bytes of state. It follows two levels: the strings of the document (level
0), and the strings of JSON text held inside a string that starts with `[` or `{` (level 1: a tool output
logged as text, where quotes are written `\\"`). A string is the value of a key when it follows `"key":`
directly; that key is handed over with it. A raw newline ends a string (JSON has none inside one): a torn line
is passed through, and the next line is read afresh.
"""

from __future__ import annotations

from .policy import HEAD, Event, Found, Held, Policy

_QUOTE, _BACKSLASH, _NEWLINE = 0x22, 0x5C, 0x0A
_SMALL = 64  # the longest key remembered
_GAP = 4096  # the most whitespace looked through between a key and its value
_WHITESPACE = b" \t\r\n"
_ESCAPED = {ord(k): v for k, v in {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.items()}
_ESCAPED |= {ord(c): c for c in '"\\/'}

# What the current string of the document is being read as.
_OUT, _OPENING, _FAST, _HOLD, _DEEP = range(5)
# How a stretch of a string's content ends: its closing quote, a newline (a torn line), the chunk's end, or an
# escape that the chunk's end cuts after its backslash.
_END, _TORN, _MORE, _CUT = range(4)


class Scanner:
    def __init__(self, policy: Policy, *, nested: bool = True) -> None:
        self.policy = policy
        self.nested = nested
        self.line = 1
        self._events: list[Event] = []
        self._data = b""
        self._mv = memoryview(b"")
        self._from = 0  # where the plain bytes not yet handed out begin, in this chunk
        self._cut = -1  # where an escape cut by the chunk's end begins
        self._found: dict[bytes, int] = {}  # _next's positions in this chunk
        self._esc = b""  # that escape's bytes so far
        self._hold: Held | None = None
        # The document's level.
        self._mode = _OUT
        self._key: bytes | None = None  # the current string's key
        self._line = 1
        self._start = 0  # where the current string's content begins in this chunk
        self._carry: bytes | None = b""  # its content in earlier chunks, while short
        self._last: bytes | None = None  # the last string closed, while short: a key if ':' follows
        self._gap = -1  # since it closed: 0 whitespace, 1 a ':' (the next string is its value), -1 other
        # Level 1, inside a _DEEP string.
        self._in1 = False
        self._bs1 = False  # an inner backslash waits for the character it escapes
        self._opening1 = False
        self._key1: bytes | None = None
        self._small1: bytearray | None = None
        self._last1: bytes | None = None
        self._gap1 = -1

    # -- the face ----------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Event]:
        """The events of one more chunk, in order: plain bytes to copy as they are, and wanted strings."""
        self._events = []
        self._data, self._mv, self._from, self._cut = data, memoryview(data), 0, -1
        self._found.clear()
        n = len(data)
        pos = self._stitch() if self._esc else 0
        while pos < n:
            mode = self._mode
            if mode == _OUT:
                pos = self._out(pos)
            elif mode == _OPENING:
                self._open(pos)
            elif mode == _FAST:
                pos = self._fast(pos)
            elif mode == _HOLD:
                pos = self._held(pos)
            else:
                pos = self._deep(pos)
        end = n if self._cut < 0 else self._cut
        if self._hold is None and self._from < end:
            self._events.append(self._mv[self._from : end])
        if self._mode != _OUT:  # the current string goes on in the next chunk (a cut escape with it)
            carry = self._carry
            size = n - self._start
            self._carry = (
                None if carry is None or len(carry) + size > _SMALL else carry + data[self._start : n]
            )
            self._start = 0
        return self._events

    def end(self) -> list[Event]:
        """The events left at the end of the input: a string still open there is cut short ("torn")."""
        self._events = []
        self._data, self._mv, self._from, self._cut = b"", memoryview(b""), 0, -1
        esc, self._esc = self._esc, b""
        if self._hold is not None:
            self._hold.parts.append(esc)
            self._hold.size += len(esc)
            self._stop(0, "torn")
        elif esc:
            self._events.append(esc)
        self._mode = _OUT
        return self._events

    # -- the document's level ----------------------------------------------------------------------------

    def _out(self, pos: int) -> int:
        data = self._data
        q = data.find(b'"', pos)
        end = len(data) if q < 0 else q
        if end > pos:
            self.line += data.count(b"\n", pos, end)
            if self._gap >= 0:
                self._gap = _gap_step(self._gap, data, pos, end)
        if q < 0:
            return end
        self._key = self._last if self._gap == 1 else None
        self._last, self._gap = None, -1
        self._line = self.line
        self._start, self._carry = q + 1, b""
        self._mode = _OPENING
        return q + 1

    def _open(self, pos: int) -> None:
        first = self._data[pos]
        if first in (_QUOTE, _NEWLINE):
            self._mode = _FAST
        elif self.nested and first in b"[{":
            self._mode = _DEEP
            self._in1 = self._bs1 = self._opening1 = False
            self._last1, self._gap1 = None, -1
        elif self.policy.may_want(0 if first == _BACKSLASH else first, 0, self._key):
            self._begin(pos, 0, self._key)
            self._mode = _HOLD
        else:
            self._mode = _FAST

    def _scan(self, pos: int) -> tuple[int, int]:
        """Where the content of the current string stops in this chunk, and why. A quote ends it unless an odd
        run of backslashes comes right before it (escapes pair up from the start of a run)."""
        data = self._data
        n = len(data)
        while True:
            q = data.find(b'"', pos)
            stop = n if q < 0 else q
            newline = data.find(b"\n", pos, stop)
            if newline >= 0:
                return newline, _TORN
            i = stop
            while i > pos and data[i - 1] == _BACKSLASH:
                i -= 1
            odd = (stop - i) % 2 == 1
            if q < 0:
                return (n - 1, _CUT) if odd else (n, _MORE)
            if not odd:
                return q, _END
            pos = q + 1

    def _fast(self, pos: int) -> int:
        end, kind = self._scan(pos)
        if kind == _END:
            self._close(end)
            return end + 1
        if kind == _TORN:
            return self._torn(end)
        return end if kind == _MORE else self._cut_escape(end)

    def _held(self, pos: int) -> int:
        end, kind = self._scan(pos)
        if end > pos:
            self._add(pos, end)
        if kind == _END:
            if self._hold is not None:
                self._finish(end)
            self._close(end)
            return end + 1
        if kind == _TORN:
            return self._torn(end)
        return end if kind == _MORE else self._cut_escape(end)

    def _close(self, end: int) -> None:
        if self._hold is not None:  # a level-1 string left open: its text was not JSON after all
            self._stop(end, "torn")
        carry = self._carry
        size = end - self._start
        if carry is not None and len(carry) + size <= _SMALL:
            self._last = carry + self._data[self._start : end]
        self._gap = 0
        self._mode = _OUT

    def _torn(self, at: int) -> int:
        if self._hold is not None:
            self._stop(at, "torn")
        self._last, self._gap = None, -1
        self._mode = _OUT
        return at

    def _cut_escape(self, at: int) -> int:
        """An escape that the chunk's end cuts: held back until the next chunk completes it."""
        self._esc = bytes(self._data[at:])
        self._cut = at
        return len(self._data)

    def _stitch(self) -> int:
        """Complete the escape the last chunk ended in; returns where this chunk's bytes go on. Only a _DEEP
        string looks inside an escape (for the quotes and backslashes of the text it holds); elsewhere an
        escape is its backslash and the next byte."""
        data = self._data
        deep = self._mode == _DEEP
        raw = self._esc + data[: max(0, 6 - len(self._esc))]
        length = 6 if deep and len(raw) > 1 and raw[1] == ord("u") else 2
        if len(raw) < length:  # still not all of it (tiny chunks)
            self._esc, self._cut = raw, 0
            return len(data)
        raw = raw[:length]
        used = length - len(self._esc)
        self._esc = b""
        if raw[1] == _NEWLINE:  # a backslash, then the line ended: the backslash is the string's last byte
            self._emit_or_hold(raw[:1])
            self._from = 0
            return self._torn(0)
        if deep:
            self._escape1(raw, -1, used)
        else:
            self._emit_or_hold(raw)
        self._from = used
        return used

    def _emit_or_hold(self, raw: bytes) -> None:
        hold = self._hold
        if hold is None:
            self._events.append(raw)
        else:
            hold.parts.append(raw)
            hold.size += len(raw)
            self._check(0)

    # -- level 1: JSON text inside a string --------------------------------------------------------------

    def _deep(self, pos: int) -> int:
        data = self._data
        n = len(data)
        if self._opening1:
            self._opening1 = False
            first = data[pos]
            if first not in b'"\n' and self.policy.may_want(
                0 if first == _BACKSLASH else first, 1, self._key1
            ):
                self._begin(pos, 1, self._key1)
        end = min(self._next(b"\\", pos), self._next(b'"', pos), self._next(b"\n", pos))
        if end > pos:
            self._run1(pos, end)
        if end == n:
            return end
        c = data[end]
        if c == _QUOTE:
            self._close(end)
            return end + 1
        if c == _NEWLINE:
            return self._torn(end)
        if end + 1 == n:
            return self._cut_escape(end)
        if data[end + 1] == _NEWLINE:  # the backslash is the string's last byte
            self._run1(end, end + 1)
            return self._torn(end + 1)
        length = 6 if data[end + 1] == ord("u") else 2
        if end + length > n:
            return self._cut_escape(end)
        self._escape1(data[end : end + length], end, end + length)
        return end + length

    def _next(self, byte: bytes, pos: int) -> int:
        """The next `byte` from `pos` in this chunk (the chunk's length if none): each found once per chunk
        and stretch, so that a string dense with escapes is not searched to its end at each one."""
        found = self._found.get(byte, -1)
        if found < pos:
            found = self._data.find(byte, pos)
            found = len(self._data) if found < 0 else found
            self._found[byte] = found
        return found

    def _run1(self, pos: int, end: int) -> None:
        if not self._in1:
            if self._gap1 >= 0:
                self._gap1 = _gap_step(self._gap1, self._data, pos, end)
            return
        self._bs1 = False
        if self._hold is not None:
            self._add(pos, end)
        small = self._small1
        if small is not None:
            self._small1 = small + self._data[pos:end] if len(small) + end - pos <= _SMALL else None

    def _escape1(self, raw: bytes, at: int, end: int) -> None:
        """One escape of a _DEEP string (`at` is where it starts in this chunk, -1 when it began in the last
        one): a character of the text inside, and for that text maybe a quote or a backslash."""
        char = _decoded(raw)
        closing = self._in1 and char == '"' and not self._bs1
        if self._hold is not None:  # an inner string held: it ends here, goes on ('\/' is a '/'), or is cut
            if raw == b"\\/" and not self._bs1:
                self._emit_or_hold(raw) if at < 0 else self._add(at, end)
                return
            if closing:
                self._finish(max(at, 0))
            else:
                self._stop(max(at, 0), "escape")
        if at < 0:
            self._events.append(raw)
            self._from = end
        if not self._in1:
            if char == '"':
                self._in1, self._bs1, self._opening1 = True, False, True
                self._key1 = self._last1 if self._gap1 == 1 else None
                self._last1, self._gap1 = None, -1
                self._small1 = bytearray()
            elif char not in "\n\t\r":
                self._gap1 = -1
            return
        if closing:
            self._in1 = self._opening1 = False
            small = self._small1
            self._last1 = None if small is None else bytes(small)
            self._gap1 = 0
            return
        small = self._small1  # the inner text as written: the escape's character
        if small is not None:
            text = char.encode("utf-8", "surrogatepass")
            self._small1 = small + text if len(small) + len(text) <= _SMALL else None
        self._bs1 = not self._bs1 and char == "\\"

    # -- holding a string the policy may want ------------------------------------------------------------

    def _begin(self, at: int, level: int, key: bytes | None) -> None:
        if self._from < at:
            self._events.append(self._mv[self._from : at])
        self._from = at
        self._hold = Held(level, key, self._line if level == 0 else self.line)

    def _add(self, pos: int, end: int) -> None:
        hold = self._hold
        if hold is None:
            return
        hold.parts.append(bytes(self._mv[pos:end]))
        hold.size += end - pos
        self._check(end)

    def _check(self, resume: int) -> None:
        """Decide as soon as the head allows; cut short past the cap. `resume`: where plain bytes go on."""
        hold = self._hold
        assert hold is not None
        if not hold.decided:
            head = hold.head()
            verdict = self.policy.wanted(head, hold.level, hold.key, False)
            if verdict is None and hold.size < HEAD:
                return
            if not verdict:
                self._release(resume)
                return
            hold.decided = True
        if hold.size > self.policy.cap:
            self._hand(resume, complete=False, reason="cap")

    def _finish(self, at: int) -> None:
        """The held string ended at `at`: handed over if wanted, else given back as plain bytes."""
        hold = self._hold
        assert hold is not None
        if hold.decided or self.policy.wanted(hold.head(), hold.level, hold.key, True):
            self._hand(at, complete=True, reason=None)
        else:
            self._release(at)

    def _stop(self, at: int, reason: str) -> None:
        """The held string ends in a way no wanted one does (its line is torn, an inner one holds an escape):
        handed over cut short if it was wanted, else given back."""
        hold = self._hold
        assert hold is not None
        if hold.decided:
            self._hand(at, complete=False, reason=reason)
        else:
            self._release(at)

    def _hand(self, resume: int, *, complete: bool, reason: str | None) -> None:
        hold = self._hold
        assert hold is not None
        self._events.append(Found(hold.raw(), hold.level, hold.key, hold.line, complete, reason))
        self._after_hold(resume)

    def _release(self, resume: int) -> None:
        hold = self._hold
        assert hold is not None
        if hold.size:
            self._events.append(hold.raw())
        self._after_hold(resume)

    def _after_hold(self, resume: int) -> None:
        level = self._hold.level if self._hold is not None else 0
        self._hold = None
        self._from = resume
        if level == 0 and self._mode == _HOLD:
            self._mode = _FAST


def _gap_step(state: int, data: bytes, pos: int, end: int) -> int:
    """What follows a closed string: whitespace, then ':' once (state 1), then whitespace; else -1."""
    if end - pos > _GAP:
        return -1
    text = data[pos:end].strip(_WHITESPACE)
    if not text:
        return state
    return 1 if state == 0 and text == b":" else -1


def _decoded(raw: bytes) -> str:
    """The character an escape stands for, as far as the text inside cares: quotes, backslashes, spaces."""
    if raw[1] == ord("u"):
        try:
            return chr(int(raw[2:6], 16))
        except ValueError:
            return "?"
    return _ESCAPED.get(raw[1], "?")
