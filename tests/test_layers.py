"""The shape of the package that import-linter cannot check: the edges call the service through the `Store`'s
methods, never through its parts (import-linter sees imports, not attributes, so this test reads the edges'
code for `store.<part>`), and no module grows past what one reads in a sitting."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "attachstore"
EDGES = ["api", "mcp", "cli", "render", "transcripts", "server.py"]
# The Store's parts, which the service and maintenance use and an edge does not.
PARTS = {
    "admissions",
    "blobs",
    "checker",
    "index",
    "local",
    "pool",
    "previews",
    "publisher",
    "reads",
    "resident",
    "variants",
}


def reaches(source: str) -> list[tuple[int, str]]:
    """Each `<...>store.<part>` in `source`: its line and the part."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or node.attr not in PARTS:
            continue
        owner = node.value
        name = (
            owner.id
            if isinstance(owner, ast.Name)
            else owner.attr
            if isinstance(owner, ast.Attribute)
            else ""
        )
        if name == "store":
            found.append((node.lineno, node.attr))
    return sorted(found)


def edge_files() -> list[Path]:
    files: list[Path] = []
    for edge in EDGES:
        path = PACKAGE / edge
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_the_edges_reach_no_part_of_the_store() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: store.{part}"
        for path in edge_files()
        for line, part in reaches(path.read_text())
    ]
    assert found == []


def test_a_reach_through_the_store_is_found() -> None:
    source = "async def f(store, self):\n    await store.index.stats()\n    self.store.resident.mappings\n"
    assert reaches(source) == [(2, "index"), (3, "resident")]
    assert reaches("store.sessions.get(key); store.read(ref)") == []


MAX_MODULE_LINES = 400  # past it a module usually holds two ideas (docs/design.md, "The map")


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
