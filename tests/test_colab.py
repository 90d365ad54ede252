"""Colab: every chapter's launch link and its setup cell name the repository in _config.yml.

The launch link (built by sphinx-book-theme from ``repository`` and ``launch_buttons``)
opens ``<colab>/github/<org>/<repo>/blob/<branch>/<path>``; the setup cell installs
``git+<url>@<branch>`` (the selfattn project). Both must name the same repository and
branch, and the link must name a notebook the repository really holds at that path. The
browser tests (tests_site/) check the link on the built pages as well; this file checks the
built HTML only when a build newer than the sources is at hand.
"""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest

from tools.book import ROOT, config, repository, setup_cell_source, toc_chapters

CHAPTERS = toc_chapters()
IDS = [p.stem for p in CHAPTERS]
COLAB = "https://colab.research.google.com"
PIP_LINE = re.compile(r"%pip install -q git\+(?P<url>\S+?)@(?P<branch>[^\"@\s]+)$", re.M)


def repo_parts() -> tuple[str, str, str]:
    """(org, repo, branch) of the repository in _config.yml (a GitHub URL, as Colab requires)."""
    url, branch = repository()
    parts = urlsplit(url)
    org, repo = parts.path.strip("/").removesuffix(".git").split("/")[:2]
    return org, repo, branch


def expected_colab_url(notebook: str) -> str:
    """The Colab link sphinx-book-theme builds for ``notebook`` (relative to the book root)."""
    cfg = config()
    org, repo, branch = repo_parts()
    colab = cfg["launch_buttons"]["colab_url"].strip("/")
    book = (cfg["repository"].get("path_to_book") or "").strip("/")
    return f"{colab}/github/{org}/{repo}/blob/{branch}/{book + '/' if book else ''}{notebook}"


def setup_cell(path) -> str:
    import json

    cells = json.loads(path.read_text())["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def tracked_files() -> set[str] | None:
    try:
        out = subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout (e.g. an unpacked archive): fall back to the file system
    return set(out.splitlines())


def test_config_names_a_github_repository_and_colab():
    cfg = config()
    url, branch = repository()
    assert urlsplit(url).netloc == "github.com", (
        f"Colab opens notebooks from GitHub only; repository.url is {url!r}"
    )
    assert len(urlsplit(url).path.strip("/").split("/")) == 2, (
        f"repository.url must be https://github.com/<org>/<repo>, got {url!r}"
    )
    assert branch, "repository.branch is empty"
    assert cfg["launch_buttons"].get("colab_url", "").strip("/") == COLAB, (
        "launch_buttons.colab_url must be set for the Colab button"
    )
    assert cfg["html"].get("use_download_button") is True, (
        "chapters must offer their .ipynb for download"
    )


def test_the_library_installs_from_the_repository_root():
    """`pip install git+<url>@<branch>` builds the project at the repository root."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "selfattn"
    assert (ROOT / "lib" / "selfattn" / "__init__.py").exists()


def test_canonical_setup_cell_installs_from_the_configured_repository():
    url, branch = repository()
    m = PIP_LINE.search(setup_cell_source())
    assert m, "the canonical setup cell has no `%pip install git+...` line"
    assert (m["url"], m["branch"]) == (url, branch)


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_setup_cell_and_launch_link_agree(path):
    url, branch = repository()
    m = PIP_LINE.search(setup_cell(path))
    assert m, (
        f"{path.name}: the first code cell does not install selfattn on Colab "
        "(python tools/book.py setup-cell)"
    )
    assert m["url"] == url and m["branch"] == branch, (
        f"{path.name}: the setup cell installs from {m['url']}@{m['branch']}, "
        f"_config.yml says {url}@{branch} "
        "(run `make execute` after changing the repository)"
    )
    org, repo, link_branch = repo_parts()
    link = expected_colab_url(path.relative_to(ROOT).as_posix())
    assert f"/github/{org}/{repo}/blob/{link_branch}/" in link
    assert f"github.com/{org}/{repo}" == m["url"].removeprefix("https://").removesuffix(".git"), (
        f"{path.name}: Colab opens {org}/{repo} but the setup cell installs from {m['url']}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_launch_link_names_the_notebooks_real_path(path):
    book = (config()["repository"].get("path_to_book") or "").strip("/")
    rel = path.relative_to(ROOT).as_posix()
    in_repo = f"{book}/{rel}" if book else rel
    assert expected_colab_url(rel).endswith(f"/blob/{repository()[1]}/{in_repo}")
    tracked = tracked_files()
    if tracked is None:
        assert (ROOT / in_repo).exists(), f"the Colab link opens {in_repo}, which does not exist"
    else:
        assert in_repo in tracked, (
            f"the Colab link opens {in_repo}, which git does not track (commit it)"
        )


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href") or ""
        if tag == "a" and href.startswith(COLAB):
            self.hrefs.append(href)


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_built_page_links_to_colab(path):
    html = ROOT / "_build" / "html" / path.relative_to(ROOT).with_suffix(".html")
    sources = [path, ROOT / "_config.yml"]
    if not html.exists() or html.stat().st_mtime < max(s.stat().st_mtime for s in sources):
        pytest.skip(
            f"no build of {path.name} newer than its sources "
            "(`make book`; tests_site checks the link too)"
        )
    parser = _Links()
    parser.feed(html.read_text())
    assert parser.hrefs == [expected_colab_url(path.relative_to(ROOT).as_posix())], (
        f"{html.name}: Colab links {parser.hrefs}"
    )
