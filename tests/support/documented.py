"""The blocks of the docs that tests run as written: a fenced block right after an HTML comment
`<!-- TAG: NAME -->` (invisible when the page is rendered)."""

from __future__ import annotations

from pathlib import Path


def documented(page: Path, tag: str, name: str) -> str:
    """The fenced block of `page` that follows the comment `<!-- TAG: NAME -->`, its text as written."""
    text = page.read_text()
    marker = f"<!-- {tag}: {name} -->"
    assert text.count(marker) == 1, f"{page.name} has no single block marked {marker}"
    after = text.split(marker, 1)[1].lstrip("\n")
    assert after.startswith("```"), f"the block marked {marker} is not a fenced block"
    return after.split("\n", 1)[1].split("\n```", 1)[0] + "\n"
