"""The Chinese edition's catalogs (locales/zh_CN, tools/i18n.py): complete, faithful, consistent.

* every document the Chinese edition translates has its catalog, with every message
  translated and none fuzzy (after the English changes, `make translations` marks what to
  redo, and this test fails until it is done);
* what must not change survives translation: every role (a glued number, a citation, a
  cross-reference), every math span, every inline code span and every link target of a
  message appears unchanged in its translation;
* one term for one concept: for each row of chapter 10's glossary, wherever the English
  term occurs in a message, its translation uses the glossary's Chinese term.

Whether the catalogs hold every message the sources yield now is checked by
``tools/i18n.py check``, which ``make book-zh`` runs before building.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

import pytest
from book import ROOT, chapter

sys.path.insert(0, str(ROOT / "tools"))
import i18n  # noqa: E402

DOCS = i18n.documents()
ROLE = re.compile(r"\{[a-z]+(?::[a-z]+)?\}`[^`]*`")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
CODE = re.compile(r"(?<![`}])`[^`\n]+`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED = re.compile(r"“[^”]*”")
# Everyday words that are also glossary terms: "key" and "value" are checked only where the
# book means the attention's keys and values, which no pattern tells apart, so not here.
GENERIC = {"key", "value"}


def is_display_math(text: str) -> bool:
    return text.startswith("\n") and text.endswith("\n")


def messages(doc: str):
    return [m for m in i18n.read(i18n.catalog(doc)) if m.id]


def placeholders(text: str) -> Counter:
    """Roles, math, inline code and link targets: what a translation must keep verbatim."""
    found = ROLE.findall(text)
    rest = ROLE.sub(" ", text)
    found += MATH.findall(rest)
    rest = MATH.sub(" ", rest)
    found += CODE.findall(rest)
    found += LINK.findall(rest)
    return Counter(found)


@pytest.mark.parametrize("doc", DOCS)
def test_catalog_is_complete(doc):
    path = i18n.catalog(doc)
    assert path.exists(), f"no catalog {path.relative_to(ROOT)}: run `make translations`"
    todo = [m.id[:60] for m in messages(doc) if m.fuzzy or not m.string]
    assert not todo, (
        f"{doc}: {len(todo)} messages untranslated or fuzzy (see `python tools/i18n.py stats`), "
        f"e.g. {todo[:3]}"
    )


@pytest.mark.parametrize("doc", DOCS)
def test_translations_keep_roles_math_code_and_links(doc):
    if not i18n.catalog(doc).exists():
        pytest.skip("no catalog")
    broken = []
    for m in messages(doc):
        if m.string and not m.fuzzy and placeholders(m.id) != placeholders(m.string):
            lost = placeholders(m.id) - placeholders(m.string)
            added = placeholders(m.string) - placeholders(m.id)
            broken.append(f"{m.id[:50]!r}: lost {list(lost)[:3]}, added {list(added)[:3]}")
    assert not broken, f"{doc}: " + "; ".join(broken[:5])


def test_placeholders_are_found():
    text = "It is {glue:text}`ch03_x:.2f` (see {cite:p}`a`), $q \\cdot k$ and `torch.exp`."
    assert placeholders(text) == Counter(
        ["{glue:text}`ch03_x:.2f`", "{cite:p}`a`", "$q \\cdot k$", "`torch.exp`"]
    )


RAW_CELLS: set[str] = set()  # the glossary table's own cells, kept as they are


def glossary() -> list[tuple[str, str]]:
    """(English term, Chinese term) pairs of chapter 10's glossary table.

    A parenthesis adds a note (the source article's own wording, an explanation) and is
    left out; "a / b" and "a + b" pair up term by term when both columns split alike.
    """
    path = chapter(10)
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = next(
        "".join(c["source"]) for c in cells if "| English | 中文 |" in "".join(c["source"])
    )
    pairs = []
    for row in re.findall(r"^\|([^|]+)\|([^|]+)\|[^|]*\|$", text, re.M):
        RAW_CELLS.update(cell.strip() for cell in row)
        en, zh = (re.sub(r"\s*[(（][^)）]*[)）]", "", cell).strip() for cell in row)
        if en in ("English", "---") or not en or not zh:
            continue
        for sep in (" / ", " + "):
            if sep in en and len(en.split(sep)) == len(zh.split(sep)):
                pairs += list(zip(en.split(sep), zh.split(sep)))
                break
        else:
            pairs.append((en, zh))
    return [(e.strip(), z.strip()) for e, z in pairs]


def test_glossary_is_parsed():
    pairs = dict(glossary())
    assert pairs["self-attention"].startswith("自注意力")
    assert pairs["query"] == "查询" and pairs["key"] == "键"


def test_one_chinese_term_for_each_glossary_term():
    pairs = glossary()
    cells = {cell for e, z in pairs for cell in (e, z)} | RAW_CELLS
    wrong = []
    for doc in DOCS:
        if not i18n.catalog(doc).exists():
            continue
        for m in messages(doc):
            if not m.string or m.fuzzy or m.id.strip() in cells or is_display_math(m.id):
                continue
            # Quoted Chinese (a source article's section title) is not the book's English.
            prose = QUOTED.sub(" ", CODE.sub(" ", MATH.sub(" ", ROLE.sub(" ", m.id))))
            for en, zh in pairs:
                if en in GENERIC:
                    continue
                stem = re.escape(en[:-1]) + "(y|ies)" if en.endswith("y") else re.escape(en)
                if re.search(rf"(?<![\w-]){stem}(s|es)?(?![\w-])", prose, re.I):
                    if zh not in m.string:
                        wrong.append(f"{doc}: {en!r} not as {zh!r} in {m.string[:40]!r}")
    assert not wrong, f"{len(wrong)} messages: " + "; ".join(wrong[:6])


def test_mask_and_unmask_keep_every_slot():
    text = "At {glue:text}`ch03_x:.2f` the weight of $q \\cdot k$ in `torch.exp` is large."
    masked, slots = i18n.mask(text)
    assert masked == "At ⟦0⟧ the weight of ⟦1⟧ in ⟦2⟧ is large."
    assert i18n.unmask("在 ⟦0⟧ 时，⟦2⟧ 中 ⟦1⟧ 的权重很大。", slots).count("$q \\cdot k$") == 1
    with pytest.raises(ValueError):
        i18n.unmask("在 ⟦0⟧ 时", slots)  # a slot lost
    with pytest.raises(ValueError):
        i18n.unmask("⟦0⟧ ⟦0⟧ ⟦1⟧ ⟦2⟧", slots)  # a slot repeated


@pytest.mark.parametrize("doc", DOCS)
def test_display_math_is_not_translated(doc):
    if not i18n.catalog(doc).exists():
        pytest.skip("no catalog")
    changed = [
        m.id[:50] for m in messages(doc) if m.string and is_display_math(m.id) and m.string != m.id
    ]
    assert not changed, f"{doc}: display math changed in translation: {changed[:3]}"
