"""The Chinese edition's explorers and diagrams (issue 51, items 2 and 3).

The explorers' saved widget state (control names, option labels, each view's alt text) and
the diagrams' labels reach the catalogs with the contexts ``widget`` and ``diagram``
(``tools/i18n.py update``); the Chinese build translates them (``_ext/book_zh_widgets.py``).
Checked here without a build: every text of every chapter's explorers and diagrams has its
translation, the translations keep their slots, and what a Chinese reader then sees has no
English word but names (models, acronyms, ``softmax``) and the English sentences that
chapter 2's model reads. ``tests_site/test_chinese_widgets.py`` checks the built pages.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

ROOT = Path(__file__).resolve().parent.parent
CATALOGS = ROOT / "locales" / "zh_CN" / "LC_MESSAGES"
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def zh_widgets():
    """_ext/book_zh_widgets.py, loaded from its file (as tools/i18n.py loads it)."""
    if "book_zh_widgets" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "book_zh_widgets", ROOT / "_ext" / "book_zh_widgets.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["book_zh_widgets"] = module
        spec.loader.exec_module(module)
    return sys.modules["book_zh_widgets"]


def translations(notebook: Path) -> dict[tuple[str, str], str]:
    """``{(context, English): Chinese}`` of a chapter's catalog (translated, not fuzzy)."""
    path = CATALOGS / "chapters" / f"{notebook.stem}.po"
    if not path.exists():
        return {}
    with path.open("rb") as f:
        return {
            (m.context, m.id): m.string for m in read_po(f) if m.id and m.string and not m.fuzzy
        }


def load(notebook: Path) -> dict:
    return json.loads(notebook.read_text(encoding="utf-8"))


#: Names that stay as they are in Chinese: models and methods, units, and ``softmax`` (the
#: book's Chinese prose keeps it, glossary of chapter 10). Acronyms (all capitals) too.
NAMES = [
    "gpt-oss-120b",
    "DeepSeek-V3",
    "Llama",
    "Qwen3",
    "Gemma",
    "BigBird",
    "BlockMask",
    "RoPE",
    "ViT",
    "softmax",
    "tanh",
    "bf16",
    "GiB",
    "delta",
    "pre-LN",
]
#: Chapter 2's explorer picks one of the English sentences its model reads: data, not words
#: of the page (its views quote them, and the tokens 'it', 'animal', ..., in quotes).
ENGLISH_DATA = {
    "the animal didn't cross the street because it was too scared",
    "the animal didn't cross the street because it was too wet",
    "the animal didn't cross the river because it was too scared",
    "the animal didn't cross the river because it was too wet",
}


def english_words(text: str) -> list[str]:
    """The English words of a text a Chinese reader sees, less names, acronyms, identifiers
    (``d_head``, ``is_causal``) and quoted data (``'it'``, “the animal ...”)."""
    rest = text
    for sentence in ENGLISH_DATA:
        rest = rest.replace(sentence, " ")
    rest = re.sub(r"“[^”]*”|'[^']*'|\w*_\w*(?:=\w+)?", " ", rest)
    for name in NAMES:
        rest = rest.replace(name, " ")
    return [w for w in re.findall(r"[A-Za-z]{2,}", rest) if not w.isupper()]


def test_english_words_are_found():
    assert english_words("掩码 (n × n) = 5 × 5") == []
    assert english_words("MLA：kv_rank = 8，softmax(S)，Llama 3 8B 4.00 GiB") == []
    assert english_words("左：“the animal ...”中从 'it' 出发") == []
    assert english_words("句子 = the animal didn't cross the river because it was too wet") == []
    assert english_words("左上对齐（is_causal=True）") == []
    assert english_words("sliding window 掩码") == ["sliding", "window"]


# ----------------------------------------------------------------------------- units
def test_a_view_alt_text_becomes_one_template():
    from selfattn.widgets._explorer import view_alt_template

    alt = "The causal mask on 16 positions, 2.5 GiB, Llama 3 8B (mask = causal, n = 16)"
    template, names, numbers = view_alt_template(alt, ["causal", "16"])
    assert template == "The {L0} mask on {0} positions, {1} GiB, Llama {2} 8B"
    assert names == ["mask", "n"] and numbers == ["16", "2.5", "3"]
    with pytest.raises(ValueError, match="ending with the values"):
        view_alt_template("The causal mask (mask = none)", ["causal"])


def _view(alt: str, labels: list[str]) -> str:
    from selfattn.widgets._explorer import _view_html

    return _view_html(b"png", alt, labels)


def test_a_saved_state_is_translated_in_place():
    from selfattn.widgets._explorer import state_messages, translate_state, view_values

    state = {
        "a": {
            "model_name": "DropdownModel",
            "state": {"description": "mask", "_options_labels": ["causal", "none"]},
        },
        "b": {
            "model_name": "SelectionSliderModel",
            "state": {"description": "n", "_options_labels": ["8", "16"]},
        },
        "c": {
            "model_name": "HTMLModel",
            "state": {
                "value": _view(
                    "The causal mask on 16 positions (mask = causal, n = 16)", ["causal", "16"]
                )
            },
        },
    }
    assert state_messages(state) == ["mask", "causal", "none", "The {L0} mask on {0} positions"]
    zh = {
        "mask": "掩码",
        "causal": "因果",
        "none": "无",
        "The {L0} mask on {0} positions": "{0} 个位置上的{L0}掩码",
    }
    assert translate_state(state, zh.get) == []
    assert state["a"]["state"] == {"description": "掩码", "_options_labels": ["因果", "无"]}
    assert state["b"]["state"]["_options_labels"] == ["8", "16"]  # numbers need none
    view = state["c"]["state"]["value"]
    assert 'alt="16 个位置上的因果掩码（掩码 = 因果，n = 16）"' in view
    assert view_values(view) == ["因果", "16"]  # the labels the controls now show
    # A text without a translation stays English and is reported.
    control = {"model_name": "DropdownModel", "state": {"description": "pattern"}}
    assert translate_state({"a": control}, zh.get) == ["pattern"]
    assert control["state"]["description"] == "pattern"


def test_a_diagram_is_translated_after_it_is_drawn():
    from selfattn import diagrams

    english = diagrams.mask_grids(n=5, length=3)
    before = diagrams.labels(english)
    fig = diagrams.mask_grids(n=5, length=3)
    left = diagrams.translate(fig, {"causal AND padding": "因果且填充"}, font="DejaVu Sans")
    assert "因果且填充" in diagrams.labels(fig) and "causal AND padding" not in diagrams.labels(
        fig
    )
    assert "causal: key j ≤ query i" in left and "−∞" not in left  # no words: nothing to do
    assert diagrams.labels(english) == before  # the English figure is its own
    assert diagrams.labels(diagrams.mask_grids(n=5, length=3)) == before


def test_english_diagrams_are_drawn_as_before():
    """Translating is a pass over a finished figure: with nothing to translate and no font,
    the picture is the same bytes."""
    from selfattn import diagrams

    fig = diagrams.five_steps(n=5, d_model=6, d_k=4, d_v=3)
    assert diagrams.translate(fig, {}) != []
    assert fig._repr_png_() == diagrams.five_steps(n=5, d_model=6, d_k=4, d_v=3)._repr_png_()


def test_a_diagram_cell_is_read_not_run():
    draw = zh_widgets().draw_diagram
    assert draw("from selfattn import diagrams\n\ndiagrams.mask_grids(n=5, length=3)").alt
    for source in ("import os\nos.getcwd()", "diagrams.mask_grids(n=len('abc'))", "x = 1"):
        with pytest.raises(ValueError):
            draw(source)


def test_the_build_finds_a_cjk_font_where_one_is_installed():
    from selfattn import diagrams

    installed = [p for p in Path("/usr/share/fonts").rglob("wqy-zenhei*")]
    if not installed:
        pytest.skip("fonts-wqy-zenhei is not installed here (.ci/run installs it)")
    assert diagrams.cjk_font() == "WenQuanYi Zen Hei"


# ----------------------------------------------------------------------------- the chapters
WITH_WIDGETS = [nb for nb in CHAPTERS if zh_widgets().widget_state(load(nb))]
WITH_DIAGRAMS = [nb for nb in CHAPTERS if zh_widgets().diagram_cells(load(nb))]


@pytest.mark.parametrize("notebook", WITH_WIDGETS, ids=lambda p: p.stem)
def test_every_explorer_text_is_chinese(notebook):
    from selfattn.widgets._explorer import CONTROL_MODELS, translate_state, view_values

    zh = translations(notebook)
    state = zh_widgets().widget_state(load(notebook))
    missing = translate_state(state, lambda text: zh.get(("widget", text)))
    assert not missing, f"{notebook.stem}: no translation (tools/i18n.py update): {missing[:3]}"
    english = []
    shown = set()
    for model in state.values():
        s = model["state"]
        if model["model_name"] in CONTROL_MODELS:
            texts = [s.get("description", "")] + s.get("_options_labels", [])
            shown.update(s.get("_options_labels", []))
        elif "selfattn-explorer-view" in str(s.get("value", "")):
            alt = html.unescape(re.search(r'alt="([^"]*)"', s["value"]).group(1))
            texts = [alt]
            # the view names the labels its controls show, so the site's explorer test holds
            assert all(label in alt for label in view_values(s["value"])), alt
        else:
            continue
        english += [(t, w) for t in texts for w in english_words(t)]
    assert not english, f"{notebook.stem}: English left: {english[:3]}"


@pytest.mark.parametrize("notebook", WITH_DIAGRAMS, ids=lambda p: p.stem)
def test_every_diagram_label_is_chinese(notebook):
    from selfattn import diagrams

    zh = translations(notebook)
    for cell in zh_widgets().diagram_cells(load(notebook)):
        fig = zh_widgets().draw_diagram("".join(cell["source"]))
        missing = diagrams.translate(fig, lambda text: zh.get(("diagram", text)))
        assert not missing, (
            f"{notebook.stem}: no translation (tools/i18n.py update): {missing[:3]}"
        )
        english = [(t, english_words(t)) for t in diagrams.labels(fig) if english_words(t)]
        assert not english, f"{notebook.stem}: English left in a diagram: {english[:3]}"


SLOT = re.compile(r"\{L?\d+\}")


@pytest.mark.parametrize("notebook", WITH_WIDGETS, ids=lambda p: p.stem)
def test_explorer_translations_keep_their_slots(notebook):
    broken = [
        en
        for (context, en), zh in translations(notebook).items()
        if context == "widget" and set(SLOT.findall(en)) != set(SLOT.findall(zh))
    ]
    assert not broken, f"{notebook.stem}: translations that lost or added a slot: {broken[:2]}"
