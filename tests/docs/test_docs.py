"""The README and the docs run as written against a live daemon, and show what it prints (harness.py has the
convention). `ATTACHSTORE_DOCS_UPDATE=1` (or `make docs`) rewrites the outputs instead of comparing them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs import harness
from tests.docs.harness import Command, File, check, matches, parse, rewritten

UPDATE = os.environ.get("ATTACHSTORE_DOCS_UPDATE") == "1"


@pytest.mark.parametrize("document", harness.DOCUMENTS)
def test_the_document_runs_as_written(document: str) -> None:
    problems = check(harness.ROOT / document, update=UPDATE)
    assert not problems, "\n\n".join(problems)


# -- the harness itself ------------------------------------------------------------------------------------

DOC = """\
Some prose.

```console
$ echo one
one
$ printf '%s\\n' "a multi-line
quote" |
  cat
a multi-line
quote
$ false
$ echo $?
1
```

```python file=hello.py
print("hello from a file")
```

```sh
echo not run
```

```console
$ python hello.py
hello from a file
```
"""


def test_parse_finds_commands_their_outputs_and_files() -> None:
    steps = parse(DOC)
    commands = [s for s in steps if isinstance(s, Command)]
    assert [c.text for c in commands] == [
        "echo one",
        "printf '%s\\n' \"a multi-line\nquote\" |\n  cat",
        "false",
        "echo $?",
        "python hello.py",
    ]
    assert [c.expected for c in commands] == [
        ["one"],
        ["a multi-line", "quote"],
        [],
        ["1"],
        ["hello from a file"],
    ]
    assert [s for s in steps if isinstance(s, File)] == [File("hello.py", 'print("hello from a file")\n')]
    lines = DOC.split("\n")
    assert [lines[c.output[0] : c.output[1]] for c in commands] == [c.expected for c in commands]


def test_a_console_block_starts_with_a_command() -> None:
    with pytest.raises(ValueError, match="starts with a `\\$ ` command"):
        parse("```console\noutput first\n```\n")


def test_matching_elides_and_compares_what_varies_as_a_kind() -> None:
    assert matches(["sha256:0aae…36ae2 done"], ["sha256:0aaea166936ae2 done"])
    assert not matches(["sha256:0aae…36ae2 done"], ["sha256:ffff936ae2 done"])
    assert matches(["first", "…", "last"], ["first", "a", "b", "last"])
    assert matches(["first", "…", "last"], ["first", "last"])
    assert not matches(["first"], ["first", "second"])
    assert matches(
        ['{"created":"2026-11-30T09:36:00.934Z"}', "X-Request-Id: 3da88153a65c78ad76ece1b653ebf462"],
        ['{"created":"2027-01-02T03:04:05.678Z"}', "X-Request-Id: 0123456789abcdef0123456789abcdef"],
    )
    assert not matches(['{"created":"2026-11-30T09:36:00.934Z"}'], ['{"created":"soon"}'])
    assert matches([], [])


def test_a_rewrite_keeps_the_lines_that_still_match() -> None:
    expected = ["ref sha256:0aae…", "created 2026-11-30T09:36:00.934Z", "old"]
    actual = ["ref sha256:0aaea166", "created 2027-01-02T03:04:05.678Z", "new", "data " + "QUJD" * 40]
    assert rewritten(expected, actual) == [
        "ref sha256:0aae…",
        "created 2026-11-30T09:36:00.934Z",
        "new",
        "data QUJDQUJDQUJDQUJD…",
    ]


def test_a_document_that_drifted_fails_and_is_rewritten_when_asked(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        DOC.replace("$ echo one\none", "$ echo one\ntwo")
        + "\n```console\n$ curl -s http://127.0.0.1:8731/healthz\n```\n"
        + "\n```console\n$ attachstore put missing.png\n```\n"
    )
    doc_lines = doc.read_text().count("\n")
    problems = check(doc)
    assert problems[:4] == [
        f"{doc}:4: $ echo one\n  -two\n  +one",
        f'{doc}:30: $ curl -s http://127.0.0.1:8731/healthz\n  +{{"status":"ok"}}',  # from a live daemon
        f"{doc}:34: $ attachstore put missing.png\n  exited 1 (show it with `$ echo $?` if it should)",
        f"{doc}:34: $ attachstore put missing.png\n"
        "  +attachstore: INVALID_REQUEST: missing.png: No such file or directory",
    ]
    assert "make docs" in problems[4]

    left = check(doc, update=True)
    assert left[0] == problems[2]  # an exit status is not the output's to fix
    assert len(left) == 2
    text = doc.read_text()
    assert "$ echo one\none\n" in text
    assert '$ curl -s http://127.0.0.1:8731/healthz\n{"status":"ok"}\n```' in text
    assert "$ attachstore put missing.png\nattachstore: INVALID_REQUEST: missing.png: No such file" in text
    assert text.count("\n") == doc_lines + 2  # two lines of output added, one changed, nothing else
