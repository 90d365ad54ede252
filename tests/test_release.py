"""Releases (tools/release.py, `make release VERSION=x.y.z`): one version, and Colab pinned to it.

* The version is written once, ``__version__`` in ``lib/selfattn/__init__.py``; pyproject.toml
  reads it from there. CITATION.cff, every notebook's setup cell (the chapters and their two
  editions) and the launch buttons (``repository.branch`` in _config.yml) agree with it: all
  on the tag ``vX.Y.Z`` of the current version, or all on the development branch (the one the
  publishing workflow builds) before the first release. These checks read the files
  themselves, not through the release tool, and ask the tool's ``--check`` as well.
* The release tool, run on a temporary copy of the repository (never on this checkout),
  rewrites all of them consistently, changes nothing else in a notebook but the install
  line, dates CHANGELOG.md's Unreleased section, builds a wheel with the new version, and
  refuses a version that is malformed, not newer, or has nothing to say in the changelog.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tools.book import ROOT, toc_chapters

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the pinned environment has it

RELEASE = ROOT / "tools" / "release.py"
EDITIONS = ("notebooks", "student")
TAG = re.compile(r"^v(\d+\.\d+\.\d+)$")
RELEASED = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def version_in(root: Path) -> str:
    init = (root / "lib" / "selfattn" / "__init__.py").read_text()
    (version,) = re.findall(r'^__version__ = "([^"]+)"$', init, re.M)
    return version


def config_in(root: Path) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text())


def workflow_branches(root: Path) -> list[str]:
    flow = yaml.safe_load((root / ".github" / "workflows" / "publish.yml").read_text())
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on:` key as True
    return on["push"]["branches"]


def notebooks_in(root: Path) -> list[Path]:
    """The chapters in _toc.yml and their editions under notebooks/ and student/."""
    found = []
    for chapter in toc_chapters():
        rel = chapter.relative_to(ROOT)
        found += [root / rel] + [root / e / rel for e in EDITIONS if (root / e / rel).exists()]
    return found


def installs_from(path: Path, url: str) -> list[str]:
    """The refs the first code cell's `%pip install -q git+<url>@<ref>` lines name."""
    cells = json.loads(path.read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "code")
    return re.findall(
        re.escape(f"%pip install -q git+{url}@") + r"(\S+)$", "".join(first["source"]), re.M
    )


def assert_places_agree(root: Path) -> str:
    """Every place names the same version or ref; returns the ref."""
    version = version_in(root)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project.get("dynamic", []), (
        "pyproject.toml must not write the version itself: dynamic = ['version']"
    )
    dynamic = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert dynamic["dynamic"]["version"] == {"attr": "selfattn.__version__"}

    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    assert str(cff["version"]) == version, f"CITATION.cff {cff['version']}, library {version}"

    changelog = (root / "CHANGELOG.md").read_text()
    released = dict(RELEASED.findall(changelog))
    assert "## [Unreleased]\n" in changelog
    repo = config_in(root)["repository"]
    url, ref = repo["url"].rstrip("/"), repo["branch"]
    if TAG.match(ref):
        assert ref == f"v{version}", f"launch buttons on {ref}, library version {version}"
        assert version in released, f"CHANGELOG.md has no dated section [{version}]"
        assert str(cff["date-released"]) == released[version]
    else:
        assert [ref] == workflow_branches(root), (
            f"repository.branch {ref!r} is neither a release tag nor the development branch"
        )
        assert not released, (
            f"released {sorted(released)}, yet the notebooks install from the branch {ref!r}"
        )
    for path in notebooks_in(root):
        assert installs_from(path, url) == [ref], (
            f"{path.relative_to(root)}: the setup cell installs from "
            f"{installs_from(path, url)}, the launch buttons open {ref}"
        )
    cell = subprocess.run(
        [sys.executable, root / "tools" / "book.py", "setup-cell"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"git+{url}@{ref}\n" in cell, "tools/book.py setup-cell does not follow _config.yml"
    check = subprocess.run(
        [sys.executable, root / "tools" / "release.py", "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    return ref


def test_setup_cells_launch_buttons_citation_and_pyproject_agree():
    assert_places_agree(ROOT)


# ----------------------------------------------------------------- the release, on a copy


def release_state(root: Path) -> dict:
    """What a release changes, as this checkout has it (notebooks are compared by their setup
    cell only: other work may re-execute a chapter while the test runs)."""
    url = config_in(root)["repository"]["url"].rstrip("/")
    state = {p: installs_from(p, url) for p in notebooks_in(root)}
    state["branch"] = config_in(root)["repository"]["branch"]
    state["version"] = version_in(root)
    for name in ("CITATION.cff", "CHANGELOG.md"):
        state[name] = hashlib.sha256((root / name).read_bytes()).hexdigest()
    return state


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The repository's files (tracked, and new ones git does not ignore), copied elsewhere."""
    dest = tmp_path_factory.mktemp("release") / "book"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def run_release(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, root / "tools" / "release.py", *args],
        cwd=root,
        capture_output=True,
        text=True,
    )


def test_release_rewrites_a_copy_consistently(copy):
    assert copy != ROOT and not (copy / ".git").exists()
    before = release_state(ROOT)
    notebooks_before = {p: p.read_text() for p in notebooks_in(copy)}
    config_before = (copy / "_config.yml").read_text()
    unreleased = (copy / "CHANGELOG.md").read_text().split("## [Unreleased]\n", 1)[1]
    url = config_in(copy)["repository"]["url"].rstrip("/")
    old_ref = config_in(copy)["repository"]["branch"]

    for bad, why in [("1.2", "X.Y.Z"), ("v1.2.3", "X.Y.Z")]:
        out = run_release(copy, bad, "--no-wheel")
        assert out.returncode != 0 and why in out.stderr, out.stderr
    assert (copy / "_config.yml").read_text() == config_before, "a refused release wrote"

    out = run_release(copy, "9.8.7", "--date", "2027-01-02")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "git tag -a v9.8.7" in out.stdout

    assert assert_places_agree(copy) == "v9.8.7"
    assert version_in(copy) == "9.8.7"
    # _config.yml: only the branch line changed (comments and layout kept).
    assert (copy / "_config.yml").read_text() == config_before.replace(
        f"  branch: {old_ref}\n", "  branch: v9.8.7\n"
    )
    # Each notebook: only the install line changed; its outputs and metadata are untouched.
    for path, text in notebooks_before.items():
        assert path.read_text() == text.replace(
            f"git+{url}@{old_ref}\\n", f"git+{url}@v9.8.7\\n"
        ), f"{path.relative_to(copy)}: the release changed more than the setup cell's ref"
    cff = yaml.safe_load((copy / "CITATION.cff").read_text())
    assert (cff["version"], str(cff["date-released"])) == ("9.8.7", "2027-01-02")
    changelog = (copy / "CHANGELOG.md").read_text()
    assert "## [Unreleased]\n\n## [9.8.7] - 2027-01-02\n" in changelog
    assert unreleased.strip() in changelog.split("## [9.8.7] - 2027-01-02\n", 1)[1]
    assert f"[9.8.7]: {url}/releases/tag/v9.8.7" in changelog
    assert f"[Unreleased]: {url}/compare/v9.8.7...HEAD" in changelog

    wheel = copy / "dist" / "selfattn-9.8.7-py3-none-any.whl"
    assert wheel.exists(), sorted(p.name for p in (copy / "dist").iterdir())
    with zipfile.ZipFile(wheel) as z:
        meta = z.read("selfattn-9.8.7.dist-info/METADATA").decode()
        names = z.namelist()
    assert "\nVersion: 9.8.7\n" in meta and "\nLicense-Expression: MIT\n" in meta
    assert "selfattn-9.8.7.dist-info/licenses/LICENSE" in names
    assert any(n.startswith("selfattn/recorded/") for n in names)

    assert release_state(ROOT) == before, "the release touched this checkout"


def test_release_refuses_an_old_version_or_an_empty_changelog_then_moves_tag_to_tag(copy):
    if version_in(copy) != "9.8.7":
        pytest.skip("needs the copy released by the previous test")
    for version, why in [("9.8.7", "already released"), ("9.8.6", "not newer")]:
        out = run_release(copy, version, "--no-wheel")
        assert out.returncode != 0 and why in out.stderr, out.stderr
    out = run_release(copy, "9.9.0", "--no-wheel")
    assert out.returncode != 0 and "Unreleased section is empty" in out.stderr, out.stderr
    assert version_in(copy) == "9.8.7"

    changelog = copy / "CHANGELOG.md"
    changelog.write_text(
        changelog.read_text().replace(
            "## [Unreleased]\n", "## [Unreleased]\n\n### Fixed\n\n- A typo.\n", 1
        )
    )
    out = run_release(copy, "9.9.0", "--no-wheel", "--date", "2027-02-03")
    assert out.returncode == 0, out.stdout + out.stderr
    assert assert_places_agree(copy) == "v9.9.0"
    text = changelog.read_text()
    assert text.index("## [9.9.0] - 2027-02-03") < text.index("- A typo.")
    assert text.index("- A typo.") < text.index("## [9.8.7] - 2027-01-02")
    assert text.count("[Unreleased]: ") == 1 and "compare/v9.9.0...HEAD" in text
    assert text.index("[9.9.0]: ") < text.index("[9.8.7]: ")
