"""A TypeScript client generated from the live daemon's /openapi.json (openapi-typescript types, openapi-fetch
calls) type-checks under tsc --strict and tours the API from Node: admissions as JSON and multipart, verified
reads, meta, a session with holds, render, a preview, an MCP tool result, errors with their codes
(docs/clients.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import node as nodejs
from tests.support.daemon import serving

HERE = Path(__file__).parent
TSC = "node_modules/typescript/bin/tsc"
CONFIG = '[routes."vision"]\ninput_modalities = ["text", "image"]\nprovider = "anthropic"\n'


@pytest.fixture(scope="module")
def node() -> nodejs.Node:
    return nodejs.require(HERE)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("interop-openapi"), CONFIG) as url:
        yield url


@pytest.fixture(scope="module")
def generated(node: nodejs.Node, daemon: str) -> str:
    """The types, generated from the document the daemon serves: drift shows up as a tsc error."""
    shutil.rmtree(HERE / "gen", ignore_errors=True)
    node.run(HERE, "gen.mjs", f"{daemon}/openapi.json")
    return daemon


def test_the_generated_client_type_checks_and_tours_the_api(node: nodejs.Node, generated: str) -> None:
    shutil.rmtree(HERE / "build", ignore_errors=True)
    node.run(HERE, TSC, "-p", "tsconfig.json")  # strict, and more; nothing is emitted on an error
    out = node.run(HERE, "build/src/tour.js", generated, timeout=120)
    assert out.splitlines()[-1] == "tour ok: 9 steps", out


MISUSE = """\
import createClient from "openapi-fetch";
import type { paths } from "../../gen/schema.js";
const api = createClient<paths>({ baseUrl: "http://127.0.0.1:1" });
const ref = "sha256:" + "0".repeat(64);
await api.GET("/v1/attachments/{ref}/preview", { params: { path: { ref }, query: { size: 100 } } });
await api.POST("/v1/attachments", { body: { images: [{ data: "" }] } });
"""


def _check(node: nodejs.Node, source: Path) -> subprocess.CompletedProcess[str]:
    """tsc on one file beside the generated types, as strict as tsconfig.json."""
    options = ["--noEmit", "--strict", "--noUncheckedIndexedAccess", "--exactOptionalPropertyTypes"]
    options += [
        "--lib",
        "ES2022",
        "--target",
        "ES2022",
        "--module",
        "NodeNext",
        "--moduleResolution",
        "NodeNext",
    ]
    options += ["--types", "node", "--skipLibCheck"]
    return subprocess.run(
        [node.node, TSC, *options, str(source)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_call_the_document_does_not_allow_does_not_compile(node: nodejs.Node, generated: str) -> None:
    """The types bind: a preview size off the ladder and an admission without its source are type errors."""
    wrong = HERE / "build" / "wrong" / "misuse.ts"
    wrong.parent.mkdir(parents=True, exist_ok=True)
    wrong.write_text(MISUSE)
    done = _check(node, wrong)
    assert done.returncode != 0, done.stdout
    errors = dict(re.findall(r"misuse\.ts\((\d+),\d+\): error (.*)", done.stdout))
    assert "'100' is not assignable" in errors.get("5", ""), done.stdout
    assert "6" in errors, done.stdout
    assert "Property 'source' is missing" in done.stdout, done.stdout


def test_the_example_of_the_docs_compiles(node: nodejs.Node, generated: str) -> None:
    """docs/clients.md's TypeScript, against the types of the document the daemon serves."""
    [example] = re.findall(r"```ts\n(.*?)```", (HERE.parents[2] / "docs" / "clients.md").read_text(), re.S)
    given = (
        'import { readFileSync } from "node:fs";\n'
        'import type { components } from "../../gen/schema.js";\n'
        "declare const token: string, base64: string;\n"
        'declare const callToolResult: components["schemas"]["CallToolResult"];\n'
        'const png = readFileSync("shot.png");\n'
    )
    source = HERE / "build" / "docs" / "example.ts"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(given + example.replace('"./gen/schema.js"', '"../../gen/schema.js"'))
    done = _check(node, source)
    assert done.returncode == 0, done.stdout
