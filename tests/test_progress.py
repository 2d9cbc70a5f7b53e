import io

from attachstore.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_line_has_objects_bytes_rate_and_eta() -> None:
    p = Progress("audit", 10, 10 * 1024 * 1024, Terminal())
    p.advance(5, 5 * 1024 * 1024)
    line = p.line(p._start + 2.0)
    assert line == "audit: 5/10 objects, 5.0 MiB/10.0 MiB, 2.5 MiB/s, ETA 0:02"


def test_it_draws_on_a_terminal_and_clears_at_the_end() -> None:
    screen = Terminal()
    p = Progress("gc", 2, 100, screen)
    p.advance(1, 50)
    p.finish()
    assert screen.getvalue().startswith("\rgc: 1/2 objects")
    assert screen.getvalue().endswith("\r\x1b[K")


def test_it_is_silent_off_a_terminal() -> None:
    stream = io.StringIO()
    p = Progress("gc", 2, 100, stream)
    p.advance(2, 100)
    p.finish()
    assert stream.getvalue() == ""
