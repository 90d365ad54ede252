"""Reporting an error: the "Open issue" button and the issue forms it and readers use.

The theme's button (``html.use_issues_button``) opens the erratum form with the page filled
in (``_ext/book_site.py``); the forms in ``.github/ISSUE_TEMPLATE/`` ask for what a fix
needs: for an erratum the chapter, the cell and what is wrong; for a Colab problem the
chapter, the cell, the error and the runtime.
"""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import book_site  # noqa: E402
import pytest
import yaml

from tools.book import ROOT, config

TEMPLATES = ROOT / ".github" / "ISSUE_TEMPLATE"
REQUIRED = {
    "erratum.yml": {"chapter", "cell", "wrong"},
    "colab.yml": {"chapter", "cell", "error", "runtime"},
}


def form(name: str) -> dict:
    return yaml.safe_load((TEMPLATES / name).read_text())


def fields(name: str) -> dict[str, dict]:
    return {f["id"]: f for f in form(name)["body"] if "id" in f}


def test_the_theme_shows_the_open_an_issue_button():
    assert config()["html"].get("use_issues_button") is True


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_issue_form_asks_for_what_a_fix_needs(name):
    spec = form(name)
    assert spec["name"] and spec["description"] and spec["body"]
    found = fields(name)
    for field_id in REQUIRED[name]:
        assert field_id in found, f"{name}: no field {field_id!r}"
        assert found[field_id].get("validations", {}).get("required") is True, (
            f"{name}: the field {field_id!r} must be required"
        )
    for f in spec["body"]:
        assert f["type"] in {"markdown", "input", "textarea", "dropdown", "checkboxes"}
        if f["type"] != "markdown":
            assert f["attributes"]["label"], f"{name}: a field without a label"
        if f["type"] == "dropdown":
            assert f["attributes"]["options"], f"{name}: a dropdown without options"


def test_blank_issues_stay_possible():
    assert yaml.safe_load((TEMPLATES / "config.yml").read_text())["blank_issues_enabled"] is True


def _page(title: str, pagename: str, language: str = "en", student: bool = False):
    app = SimpleNamespace(
        builder=SimpleNamespace(format="html"),
        config=SimpleNamespace(book_edition_language=language, book_student_edition=student),
    )
    issue = {
        "type": "link",
        "url": "https://github.com/o/r/issues/new?title=Issue%20on%20page&body=x",
        "label": "source-issues-button",
    }
    repo = {"type": "link", "url": "https://github.com/o/r", "label": "source-repository-button"}
    context = {
        "title": title,
        "header_buttons": [{"type": "group", "buttons": [repo, issue], "label": "source-buttons"}],
    }
    book_site.erratum_issue_link(app, pagename, "page.html", context, None)
    return issue["url"], repo["url"]


@pytest.mark.parametrize(
    "language, student, page",
    [
        ("en", False, "chapters/03_scaled_dot_product.html"),
        ("zh_CN", False, "zh/chapters/03_scaled_dot_product.html"),
        ("en", True, "student edition, chapters/03_scaled_dot_product.html"),
    ],
)
def test_open_issue_button_opens_the_erratum_form_for_the_page(language, student, page):
    url, repo = _page("3. Scaled dot-product &amp; more", "chapters/03_scaled_dot_product",
                      language, student)  # fmt: skip
    assert repo == "https://github.com/o/r", "only the issue button changes"
    parts = urlsplit(url)
    assert (parts.netloc, parts.path) == ("github.com", "/o/r/issues/new")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query["template"] == book_site.ERRATUM_FORM
    assert (TEMPLATES / query["template"]).exists()
    assert query["title"] == "Erratum: 3. Scaled dot-product & more"
    assert query["chapter"] == f"3. Scaled dot-product & more ({page})"
    prefilled = set(query) - {"template", "title", "labels"}
    assert prefilled <= set(fields(book_site.ERRATUM_FORM)), (
        f"the button fills in fields the erratum form lacks: {prefilled}"
    )
