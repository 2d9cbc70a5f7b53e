"""The package as an index shows it: metadata a user looks for, an sdist without tests that cannot run from
it, a README whose links resolve there, both distributions passing `twine check --strict`; and the built
wheel, installed into a fresh environment outside the checkout, runs the README's tour."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from trove_classifiers import classifiers as known

from tests.deploy.podman import BUILD, ROOT
from tests.docs import harness

HOME = "https://github.com/attachstore/attachstore"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slugs(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_metadata_names_the_package_where_a_user_looks() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(project["classifiers"]) <= known
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(project["urls"])
    assert all(url.startswith(HOME) for url in project["urls"].values())
    assert project["license"] == "Apache-2.0"
    assert "Apache License" in (ROOT / project["license-files"][0]).read_text()


def test_every_readme_link_resolves_on_a_package_index() -> None:
    readme = (ROOT / "README.md").read_text()
    for target in LINK.findall(readme):
        if target.startswith("#"):
            assert target[1:] in slugs(readme), target
            continue
        assert target.startswith("https://"), f"{target}: relative links break on a package index"
        if target.startswith(f"{HOME}/blob/main/"):
            path, _, anchor = target.removeprefix(f"{HOME}/blob/main/").partition("#")
            assert (ROOT / path).is_file(), target
            if anchor:
                assert anchor in slugs((ROOT / path).read_text()), target


def run(*command: str, cwd: Path | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD, cwd=cwd)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist`'s two commands, into a directory of the test's."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", str(out), str(ROOT))
    run(sys.executable, "-m", "twine", "check", "--strict", *sorted(map(str, out.iterdir())))
    return out


def test_the_sdist_carries_no_tests_and_the_wheel_its_data(dist: Path) -> None:
    [sdist] = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
    assert not [name for name in names if name.startswith("tests")]
    assert {"LICENSE", "README.md", "docs/deployment.md", "deploy/Dockerfile", "attachstore/py.typed"} <= set(
        names
    )
    [wheel] = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        carried = set(archive.namelist())
    assert {"attachstore/py.typed", "attachstore/shipped/attachstore.service"} <= carried
    assert any(name.endswith("licenses/LICENSE") for name in carried)


def test_the_wheel_installed_outside_the_checkout_runs_the_tour(dist: Path, tmp_path: Path) -> None:
    """As a user who installed the package: a fresh virtual environment, the built wheel and its dependencies,
    and the README's tour run with that installation's attachstore, from a directory outside the checkout."""
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    python = str(venv / "bin" / "python")
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel), cwd=tmp_path)
    where = run(python, "-c", "import attachstore; print(attachstore.__file__)", cwd=tmp_path)
    assert where.startswith(str(venv)), where
    problems = harness.check(ROOT / "README.md", python=python)
    assert not problems, "\n\n".join(problems)
