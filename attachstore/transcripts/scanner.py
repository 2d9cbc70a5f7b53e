"""The streaming scanner under strip and restore: JSON text in as raw bytes, the same bytes out, except that
the strings a policy wants are handed over whole, as written (docs/transcripts.md, "What strip does").
It reads the bytes once, in chunks, and never holds a line; it follows the document's strings (level 0)
and those of JSON text held in a string (level 1). A raw newline ends a string: a torn line passes through."""

from __future__ import annotations

from .nested import AFTER_COLON, AFTER_STRING, KEY_MAX, NOT_KEY, Nested, after_step, decoded
from .policy import HEAD, Event, Found, Held, Policy

_QUOTE, _BACKSLASH, _NEWLINE = 0x22, 0x5C, 0x0A

# What the document's current string is read as: none is open, its first byte comes next, one no policy
# wants (only its end is looked for), one held for the policy, one that holds JSON text (level 1).
_BETWEEN, _OPENING, _SKIPPING, _HOLDING, _NESTED = range(5)
# How a stretch of a string's content ends: its closing quote, a newline (a torn line), the chunk's end, or an
# escape that the chunk's end cuts after its backslash.
_END, _TORN, _MORE, _CUT = range(4)


class _Document:
    __slots__ = ("after", "carry", "key", "last", "line", "mode", "start")

    def __init__(self) -> None:
        self.mode = _BETWEEN
        self.key: bytes | None = None  # the current string's key
        self.line = 1  # the line it starts on
        self.start = 0  # where its content begins in this chunk
        self.carry: bytes | None = b""  # its content in earlier chunks, while short enough to be a key
        self.last: bytes | None = None  # the last string closed, while short enough to be a key
        self.after = NOT_KEY


class Scanner:
    def __init__(self, policy: Policy, *, nested: bool = True) -> None:
        self.policy = policy
        self.nested = nested
        self.line = 1
        self._doc = _Document()
        self._inner = Nested()
        self._held: Held | None = None
        self._pending_escape = b""  # an escape the last chunk's end cut, its bytes so far
        # The chunk being read.
        self._events: list[Event] = []
        self._data = b""
        self._view = memoryview(b"")
        self._plain_from = 0  # where the plain bytes not yet handed out begin
        self._cut_at = -1  # where an escape cut by its end begins
        self._next_at: dict[bytes, int] = {}  # _next's positions

    # -- the face ----------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[Event]:
        self._events = []
        self._data, self._view, self._plain_from, self._cut_at = data, memoryview(data), 0, -1
        self._next_at.clear()
        doc = self._doc
        n = len(data)
        pos = self._complete_escape() if self._pending_escape else 0
        while pos < n:
            mode = doc.mode
            if mode == _BETWEEN:
                pos = self._between(pos)
            elif mode == _OPENING:
                self._opening(pos)
            elif mode == _SKIPPING:
                pos = self._skipping(pos)
            elif mode == _HOLDING:
                pos = self._holding(pos)
            else:
                pos = self._nested_text(pos)
        end = n if self._cut_at < 0 else self._cut_at
        if self._held is None and self._plain_from < end:
            self._events.append(self._view[self._plain_from : end])
        if doc.mode != _BETWEEN:  # the current string goes on in the next chunk (a cut escape with it)
            carry = doc.carry
            size = n - doc.start
            doc.carry = None if carry is None or len(carry) + size > KEY_MAX else carry + data[doc.start : n]
            doc.start = 0
        return self._events

    def end(self) -> list[Event]:
        # A string still open at the end of the input is cut short ("torn").
        self._events = []
        self._data, self._view, self._plain_from, self._cut_at = b"", memoryview(b""), 0, -1
        escape, self._pending_escape = self._pending_escape, b""
        if self._held is not None:
            self._held.add(escape)
            self._stop(0, "torn")
        elif escape:
            self._events.append(escape)
        self._doc.mode = _BETWEEN
        return self._events

    # -- the document's level ----------------------------------------------------------------------------

    def _between(self, pos: int) -> int:
        data, doc = self._data, self._doc
        q = data.find(b'"', pos)
        end = len(data) if q < 0 else q
        if end > pos:
            self.line += data.count(b"\n", pos, end)
            if doc.after != NOT_KEY:
                doc.after = after_step(doc.after, data, pos, end)
        if q < 0:
            return end
        doc.key = doc.last if doc.after == AFTER_COLON else None
        doc.last, doc.after = None, NOT_KEY
        doc.line = self.line
        doc.start, doc.carry = q + 1, b""
        doc.mode = _OPENING
        return q + 1

    def _opening(self, pos: int) -> None:
        doc = self._doc
        first = self._data[pos]
        if first in (_QUOTE, _NEWLINE):
            doc.mode = _SKIPPING
        elif self.nested and first in b"[{":
            doc.mode = _NESTED
            self._inner.reset()
        elif self.policy.may_want(0 if first == _BACKSLASH else first, 0, doc.key):
            self._hold(pos, 0, doc.key)
            doc.mode = _HOLDING
        else:
            doc.mode = _SKIPPING

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

    def _skipping(self, pos: int) -> int:
        end, kind = self._scan(pos)
        if kind == _END:
            self._close(end)
            return end + 1
        if kind == _TORN:
            return self._torn(end)
        return end if kind == _MORE else self._cut_escape(end)

    def _holding(self, pos: int) -> int:
        end, kind = self._scan(pos)
        if end > pos:
            self._add(pos, end)
        if kind == _END:
            if self._held is not None:
                self._finish(end)
            self._close(end)
            return end + 1
        if kind == _TORN:
            return self._torn(end)
        return end if kind == _MORE else self._cut_escape(end)

    def _close(self, end: int) -> None:
        doc = self._doc
        if self._held is not None:  # a level-1 string left open: its text was not JSON after all
            self._stop(end, "torn")
        carry = doc.carry
        size = end - doc.start
        if carry is not None and len(carry) + size <= KEY_MAX:
            doc.last = carry + self._data[doc.start : end]
        doc.after = AFTER_STRING
        doc.mode = _BETWEEN

    def _torn(self, at: int) -> int:
        doc = self._doc
        if self._held is not None:
            self._stop(at, "torn")
        doc.last, doc.after = None, NOT_KEY
        doc.mode = _BETWEEN
        return at

    def _cut_escape(self, at: int) -> int:
        self._pending_escape = bytes(self._data[at:])
        self._cut_at = at
        return len(self._data)

    def _complete_escape(self) -> int:
        """Complete the escape the last chunk ended in. Only a _NESTED string looks inside an escape."""
        data = self._data
        nested = self._doc.mode == _NESTED
        raw = self._pending_escape + data[: max(0, 6 - len(self._pending_escape))]
        length = 6 if nested and len(raw) > 1 and raw[1] == ord("u") else 2
        if len(raw) < length:  # still not all of it (tiny chunks)
            self._pending_escape, self._cut_at = raw, 0
            return len(data)
        raw = raw[:length]
        used = length - len(self._pending_escape)
        self._pending_escape = b""
        if raw[1] == _NEWLINE:  # a backslash, then the line ended: the backslash is the string's last byte
            self._emit_or_hold(raw[:1])
            self._plain_from = 0
            return self._torn(0)
        if nested:
            self._nested_escape(raw, -1, used)
        else:
            self._emit_or_hold(raw)
        self._plain_from = used
        return used

    def _emit_or_hold(self, raw: bytes) -> None:
        held = self._held
        if held is None:
            self._events.append(raw)
        else:
            held.add(raw)
            self._check(0)

    # -- level 1: JSON text inside a string --------------------------------------------------------------

    def _nested_text(self, pos: int) -> int:
        data, inner = self._data, self._inner
        n = len(data)
        if inner.opening:
            inner.opening = False
            first = data[pos]
            if first not in b'"\n' and self.policy.may_want(
                0 if first == _BACKSLASH else first, 1, inner.key
            ):
                self._hold(pos, 1, inner.key)
        end = min(self._next(b"\\", pos), self._next(b'"', pos), self._next(b"\n", pos))
        if end > pos:
            self._nested_run(pos, end)
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
            self._nested_run(end, end + 1)
            return self._torn(end + 1)
        length = 6 if data[end + 1] == ord("u") else 2
        if end + length > n:
            return self._cut_escape(end)
        self._nested_escape(data[end : end + length], end, end + length)
        return end + length

    def _next(self, byte: bytes, pos: int) -> int:
        """The next `byte` from `pos` in this chunk (the chunk's length if none): each found once per chunk
        and stretch, so that a string dense with escapes is not searched to its end at each one."""
        found = self._next_at.get(byte, -1)
        if found < pos:
            found = self._data.find(byte, pos)
            found = len(self._data) if found < 0 else found
            self._next_at[byte] = found
        return found

    def _nested_run(self, pos: int, end: int) -> None:
        inner = self._inner
        if inner.in_string and self._held is not None:
            self._add(pos, end)
        inner.run(self._data, pos, end)

    def _nested_escape(self, raw: bytes, at: int, end: int) -> None:
        inner = self._inner
        char = decoded(raw)
        closing = inner.closes(char)
        if self._held is not None:  # an inner string held: it ends here, goes on ('\/' is a '/'), or is cut
            if raw == b"\\/" and not inner.escaping:
                self._emit_or_hold(raw) if at < 0 else self._add(at, end)
                return
            if closing:
                self._finish(max(at, 0))
            else:
                self._stop(max(at, 0), "escape")
        if at < 0:
            self._events.append(raw)
            self._plain_from = end
        inner.escape(char, closing)

    # -- holding a string the policy may want ------------------------------------------------------------

    def _hold(self, at: int, level: int, key: bytes | None) -> None:
        if self._plain_from < at:
            self._events.append(self._view[self._plain_from : at])
        self._plain_from = at
        self._held = Held(level, key, self._doc.line if level == 0 else self.line)

    def _add(self, pos: int, end: int) -> None:
        if self._held is None:
            return
        self._held.add(bytes(self._view[pos:end]))
        self._check(end)

    def _check(self, resume: int) -> None:
        held = self._held
        assert held is not None
        if not held.decided:
            verdict = self.policy.wanted(held.head(), held.level, held.key, False)
            if verdict is None and held.size < HEAD:
                return
            if not verdict:
                self._release(resume)
                return
            held.decided = True
        if held.size > self.policy.cap:
            self._hand(resume, complete=False, reason="cap")

    def _finish(self, at: int) -> None:
        held = self._held
        assert held is not None
        if held.decided or self.policy.wanted(held.head(), held.level, held.key, True):
            self._hand(at, complete=True, reason=None)
        else:
            self._release(at)

    def _stop(self, at: int, reason: str) -> None:
        """The held string ends in a way no wanted one does (its line is torn, an inner one holds an escape):
        handed over cut short if it was wanted, else given back."""
        held = self._held
        assert held is not None
        if held.decided:
            self._hand(at, complete=False, reason=reason)
        else:
            self._release(at)

    def _hand(self, resume: int, *, complete: bool, reason: str | None) -> None:
        held = self._held
        assert held is not None
        self._events.append(Found(held.raw(), held.level, held.key, held.line, complete, reason))
        self._after_hold(resume)

    def _release(self, resume: int) -> None:
        held = self._held
        assert held is not None
        if held.size:
            self._events.append(held.raw())
        self._after_hold(resume)

    def _after_hold(self, resume: int) -> None:
        level = self._held.level if self._held is not None else 0
        self._held = None
        self._plain_from = resume
        if level == 0 and self._doc.mode == _HOLDING:
            self._doc.mode = _SKIPPING
