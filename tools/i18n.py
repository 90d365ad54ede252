"""The Chinese edition: message catalogs from the English sources, and its configuration.

    python tools/i18n.py update [DOC...] # make translations: extract, then update the catalogs
    python tools/i18n.py stats           # translated / fuzzy / untranslated per catalog
    python tools/i18n.py check           # fail if the catalogs miss a message of the sources
    python tools/i18n.py config OUT.yml  # the zh_CN edition's Jupyter Book configuration
    python tools/i18n.py library [--check]  # the library's catalog (checkers' messages) + .mo
    python tools/i18n.py todo DOC OUT.json     # a document's messages left to translate
    python tools/i18n.py apply DOC IN.json     # write translations back into its catalog
                                               # (DOC "glue": the glued words, see below)

Sphinx's own internationalisation: the gettext builder extracts every paragraph, heading,
list item, table cell, admonition and directive body of the book as a message; sphinx-intl
keeps one catalog per document under ``locales/zh_CN/LC_MESSAGES/`` (the intro and every
chapter; the API reference, generated from docstrings, stays English). When the English
changes, ``update`` adds the new messages (untranslated) and marks the changed ones fuzzy;
``tests/test_translations.py`` fails until each is translated and its fuzzy flag removed,
and ``check`` (run by ``make book-zh``) fails when the catalogs were not updated at all.

Three kinds of text are not Sphinx messages, and the catalogs hold them too:

* **figure alt texts** (``metadata.mystnb.image.alt`` of a code cell) and **exercise titles**
  (the argument of ``{exercise-start}``, which sphinx-exercise keeps out of gettext):
  ``update`` adds each to its chapter's catalog with the context ``alt`` or ``exercise``;
  the Chinese build swaps them for their translations (``_ext/book_zh.py``, fed by
  :func:`config`);
* **explorers and diagrams**: a chapter's explorers keep their texts in the notebook's saved
  widget state (control names, option labels, each view's alt text as one template per
  sentence, context ``widget``) and its diagrams draw theirs (context ``diagram``):
  ``update`` adds both to the chapter's catalog (``_ext/book_zh_widgets.py`` finds them),
  and the Chinese build translates the widget state and redraws the diagrams in Chinese;
* **glued words**: a ``{glue:text}`` role stands for a value the notebook recorded, a number
  (the same in both editions) or words ("meets", "none", chapter 10's summary lines).
  Every glued value with words is a message of ``locales/zh_CN/glue.po``: its context is
  the glue key, its id the English value. When a chapter is re-recorded and a value changes,
  ``update`` adds the new value (with the old translation as a fuzzy suggestion) and the
  tests, ``check`` and the build fail until it is translated. Values that are names in
  every language (:data:`NAME_GLUES`, the benchmark's CPU) are not translated.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import toc_files  # noqa: E402

LANGUAGE = "zh_CN"
LOCALES = ROOT / "locales"
CATALOGS = LOCALES / LANGUAGE / "LC_MESSAGES"
POT_BUILD = ROOT / "_build" / "gettext"
#: Documents that stay English in the Chinese edition (generated from docstrings).
ENGLISH_ONLY = {"api"}
TITLE = "可运行的自注意力"
#: The licence statement in the footer (_config.yml's html.extra_footer), in Chinese.
FOOTER = (
    '<p>文字与图采用 <a href="https://creativecommons.org/licenses/by/4.0/" rel="license">'
    "CC BY 4.0</a> 许可；代码（<code>selfattn</code> 库、工具和笔记本中的代码单元）采用 "
    '<a href="https://opensource.org/license/mit" rel="license">MIT 许可证</a>。</p>'
)
BIN = Path(sys.executable).parent
#: The glued words (see the module docstring): context = glue key, id = the English value.
GLUE_CATALOG = LOCALES / LANGUAGE / "glue.po"
#: Glued values that are names, the same in every language: never translated.
NAME_GLUES = {"ch07_bench_cpu"}
#: The contexts, in a chapter's catalog, of a figure's alt text and of an exercise's title
#: (texts that Sphinx's gettext does not extract; _ext/book_zh.py translates them).
ALT_CONTEXT = "alt"
EXERCISE_CONTEXT = "exercise"
#: The contexts of an explorer's texts and of a diagram's labels (_ext/book_zh_widgets.py).
WIDGET_CONTEXT = "widget"
DIAGRAM_CONTEXT = "diagram"
#: The Chinese notebook edition (tools/notebook_edition.py's ZH_EDITIONS), which the Chinese
#: site's Colab and download buttons open.
ZH_NOTEBOOKS = "notebooks/zh"


def documents() -> list[str]:
    """The documents the Chinese edition translates, in book order."""
    return [d for d in toc_files() if d not in ENGLISH_ONLY]


def catalog(doc: str) -> Path:
    return GLUE_CATALOG if doc == "glue" else CATALOGS / f"{doc}.po"


def read(path: Path):
    with path.open("rb") as f:
        return read_po(f)


def extract() -> Path:
    """Run the gettext builder; returns the folder holding one ``.pot`` per document."""
    shutil.rmtree(POT_BUILD, ignore_errors=True)
    subprocess.run(
        [BIN / "jupyter-book", "build", ROOT, "--builder", "custom"]
        + ["--custom-builder", "gettext", "--path-output", POT_BUILD, "-q"],
        check=True,
    )
    return POT_BUILD / "_build" / "gettext"


def update(docs: list[str] | None = None) -> None:
    """Extract the messages, then merge them into the catalogs of ``docs`` (default: all)."""
    import tempfile

    docs = docs or documents()
    unknown = sorted(set(docs) - set(documents()))
    if unknown:
        sys.exit(f"not documents of the Chinese edition: {unknown}")
    pots = extract()
    with tempfile.TemporaryDirectory() as tmp:
        for doc in docs:  # only these catalogs are touched: others may be in someone's hands
            target = Path(tmp, f"{doc}.pot")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(pots / f"{doc}.pot", target)
            add_extra_messages(doc, target)
        subprocess.run(
            [BIN / "sphinx-intl", "update", "-p", tmp, "-d", LOCALES, "-l", LANGUAGE, "-w", "0"],
            check=True,
        )
    if set(docs) == set(documents()):
        wanted = {catalog(d) for d in documents()}
        for stale in set(CATALOGS.rglob("*.po")) - wanted:
            stale.unlink()
    for doc in docs:
        prefill(doc)
    update_glue()
    stats()


def extra_messages(doc: str) -> list[tuple[str, str]]:
    """``(text, context)`` of the texts of ``doc``'s notebook that Sphinx's gettext does not
    extract: each figure's alt text (context ``alt``) and each exercise's title (context
    ``exercise``, the argument of ``{exercise-start}``), in order, without repeats."""
    source = ROOT / f"{doc}.ipynb"
    if not source.exists():
        return []
    found = []
    for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]:
        image = cell.get("metadata", {}).get("mystnb", {}).get("image", {})
        alt = image.get("alt") if isinstance(image, dict) else None
        if isinstance(alt, str) and alt.strip():
            found.append((alt.strip(), ALT_CONTEXT))
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"])
            for title in re.findall(r"^[`:]{3,}\{exercise-start\}[ \t]*(\S.*?)\s*$", text, re.M):
                found.append((title, EXERCISE_CONTEXT))
    # The explorers' texts and the diagrams' labels (contexts widget and diagram).
    found += _zh_widgets().notebook_messages(json.loads(source.read_text(encoding="utf-8")))
    return list(dict.fromkeys(found))


def _zh_widgets():
    """_ext/book_zh_widgets.py (the explorers' and diagrams' texts), loaded from its file."""
    import importlib.util

    if "book_zh_widgets" not in sys.modules:
        path = ROOT / "_ext" / "book_zh_widgets.py"
        spec = importlib.util.spec_from_file_location("book_zh_widgets", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["book_zh_widgets"] = module
        spec.loader.exec_module(module)
    return sys.modules["book_zh_widgets"]


def alt_texts(doc: str) -> list[str]:
    """The alt texts of the figures of ``doc``'s notebook, in order."""
    return [text for text, ctx in extra_messages(doc) if ctx == ALT_CONTEXT]


def add_extra_messages(doc: str, pot: Path) -> None:
    """Append ``doc``'s alt texts and exercise titles to its extracted ``.pot``."""
    cat = read(pot)
    for text, context in extra_messages(doc):
        cat.add(text, context=context, locations=[(f"{doc}.ipynb", 0)])
    write(pot, cat)


def translated_extras() -> dict[str, dict[str, str]]:
    """``{context: {English: Chinese}}`` of the alt texts and exercise titles over every
    catalog (translated, not fuzzy), for _ext/book_zh.py."""
    found: dict[str, dict[str, str]] = {
        c: {} for c in (ALT_CONTEXT, EXERCISE_CONTEXT, WIDGET_CONTEXT, DIAGRAM_CONTEXT)
    }
    for doc in documents():
        if catalog(doc).exists():
            for m in read(catalog(doc)):
                if m.id and m.context in found and m.string and not m.fuzzy:
                    found[m.context][m.id] = m.string
    return found


# Math, roles (glued numbers, citations, references) and inline code: never translated.
_VERBATIM = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$|\{[a-z]+(?::[a-z]+)?\}`[^`]*`|`[^`\n]+`", re.S)


def needs_no_translation(text: str) -> bool:
    """True for a message with no English word outside math, roles and code (a formula, a
    glued number alone, a Chinese quotation): its translation is itself."""
    if text.startswith("\n") and text.endswith("\n"):  # a display-math block ($$ ... $$)
        return True
    return not re.search(r"[A-Za-z]{2,}", _VERBATIM.sub(" ", text))


def prefill(doc: str) -> None:
    """Translate the messages that need no translation by themselves."""
    cat = read(catalog(doc))
    changed = 0
    for m in cat:
        if m.id and not m.string and needs_no_translation(m.id):
            m.string = escape_numbered(m.id)
            changed += 1
    if changed:
        write(catalog(doc), cat)


def counts(doc: str) -> dict[str, int]:
    entries = [m for m in read(catalog(doc)) if m.id]
    return {
        "messages": len(entries),
        "translated": sum(bool(m.string) and not m.fuzzy for m in entries),
        "fuzzy": sum(m.fuzzy for m in entries),
        "untranslated": sum(not m.string for m in entries),
    }


def stats() -> None:
    total = dict.fromkeys(("messages", "translated", "fuzzy", "untranslated"), 0)
    for doc in documents() + ["glue"]:
        if not catalog(doc).exists():
            print(f"{doc:40s} no catalog (run make translations)")
            continue
        c = counts(doc)
        total = {k: total[k] + c[k] for k in total}
        print(f"{doc:40s} " + "  ".join(f"{k} {v}" for k, v in c.items()))
    print(f"{'all':40s} " + "  ".join(f"{k} {v}" for k, v in total.items()))


def check() -> None:
    """Every message the sources yield now is in its document's catalog."""
    pots = extract()
    missing = {}
    for doc in documents():
        wanted = {(m.id, m.context) for m in read(pots / f"{doc}.pot") if m.id}
        wanted |= set(extra_messages(doc))
        have = set()
        if catalog(doc).exists():
            have = {(m.id, m.context) for m in read(catalog(doc)) if m.id}
        if wanted - have:
            missing[doc] = sorted(m for m, _ in wanted - have)
    todo = glue_todo()
    if todo:
        missing["glued words (locales/zh_CN/glue.po)"] = sorted(f"{k}: {v}" for k, v in todo)
    if missing:
        lines = [f"  {doc}: {len(ids)} new, e.g. {ids[0][:70]!r}" for doc, ids in missing.items()]
        sys.exit(
            "the English changed since the catalogs were updated: run `make translations`, "
            "translate the new messages, then rebuild\n" + "\n".join(lines)
        )
    print(f"catalogs current: {len(documents())} documents, {len(text_glues())} glued words")


def write(path: Path, cat) -> None:
    with path.open("wb") as f:
        write_po(f, cat, width=0)  # no wrapping, as sphinx-intl update -w 0 writes


def escape_numbered(text: str) -> str:
    """``"3. 标题"`` -> ``"3\\. 标题"``: Sphinx re-parses a translation with MyST, which reads
    a leading ``3. `` as an ordered list and drops the translation of a numbered heading
    (MyST-Parser issue 852); the escaped period renders the same."""
    return re.sub(r"^(\d+)\. ", r"\1\\. ", text)


def mask(text: str) -> tuple[str, list[str]]:
    """``text`` with every math span, role and code span replaced by a slot ``⟦n⟧``."""
    slots: list[str] = []

    def keep(m: re.Match) -> str:
        slots.append(m.group(0))
        return f"⟦{len(slots) - 1}⟧"

    return _VERBATIM.sub(keep, text), slots


def unmask(text: str, slots: list[str]) -> str:
    """Put the slots back; every slot must be used exactly once."""
    used = [int(n) for n in re.findall(r"⟦(\d+)⟧", text)]
    if sorted(used) != list(range(len(slots))):
        raise ValueError(f"slots used {sorted(used)}, expected 0..{len(slots) - 1}: {text[:80]!r}")
    return re.sub(r"⟦(\d+)⟧", lambda m: slots[int(m.group(1))], text)


def todo(doc: str, out: Path) -> None:
    """The messages of ``doc`` that are untranslated or fuzzy, as a JSON list to fill in.

    Each item: ``id`` (the English message), ``text`` (the same with math, roles and code
    replaced by slots ``⟦0⟧``, ``⟦1⟧``, ... that the translation keeps), ``old`` (a fuzzy
    message's previous translation, if any) and ``zh``, to fill in with the translation of
    ``text``, slots included. :func:`apply` puts the slots back.
    """
    items = []
    for m in read(catalog(doc)):
        if m.id and (m.fuzzy or not m.string):
            text, _ = mask(m.id)
            item = {"id": m.id, "text": text, "old": m.string if m.fuzzy else "", "zh": ""}
            if m.context:
                item["context"] = m.context
            items.append(item)
    out.write_text(json.dumps(items, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(items)} messages to translate -> {out}")


def apply(doc: str, source: Path) -> None:
    """Write the translations in ``source`` (:func:`todo`'s list with ``zh`` filled in, or
    ``[{"id", "str"}]`` with the final text) into the catalog, clearing fuzzy flags.
    Messages the catalog no longer has (the English changed since) are skipped and counted."""
    cat = read(catalog(doc))
    done, gone, bad = 0, 0, []
    for item in json.loads(source.read_text(encoding="utf-8")):
        message = cat.get(item["id"], context=item.get("context"))
        if message is None:
            gone += 1
            continue
        text = item.get("str", "")
        if item.get("zh", "").strip():
            try:
                text = unmask(item["zh"], mask(item["id"])[1])
            except ValueError as err:
                bad.append(str(err))
                continue
        if text.strip():
            message.string = escape_numbered(text)
            message.flags.discard("fuzzy")
            done += 1
    write(catalog(doc), cat)
    print(f"{doc}: {done} translations written, {gone} for messages no longer there")
    if bad:
        sys.exit(f"{len(bad)} translations lost or repeated a slot:\n  " + "\n  ".join(bad))


GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`([^`:]+)(?::([^`]*))?`")
# A number as a glued value prints it: digits, a sign, a point, an exponent, a percent.
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?%?")


def has_words(value: str) -> bool:
    """True for a glued value with words in it (not a number, a list of numbers, NaN)."""
    rest = _NUMBER.sub(" ", value)
    return bool(re.search(r"[A-Za-z]", rest)) and rest.strip() not in ("NaN", "nan", "inf")


def glue_values(doc: str) -> dict[str, str]:
    """``{key: text/plain}`` of every glue output stored in ``doc``'s notebook."""
    from tools.notebook_edition import _glue_values

    source = ROOT / f"{doc}.ipynb"
    return _glue_values(json.loads(source.read_text(encoding="utf-8"))) if source.exists() else {}


def glue_roles(messages: dict[str, list[str]] | None = None) -> dict[str, str]:
    """``{glue key: value as shown}`` for every glue role in the messages of each document
    (default: its catalog's), formatted as myst-nb formats it from the notebook."""
    from myst_nb.core.variables import format_plain_text

    found = {}
    for doc in documents():
        if messages is not None:
            ids = messages.get(doc, [])
        elif catalog(doc).exists():
            ids = [m.id for m in read(catalog(doc)) if m.id]
        else:
            ids = []
        values = glue_values(doc)
        for text in ids:
            for role in GLUE_ROLE.finditer(text):
                key, fmt = role.group(1), role.group(2) or ""
                if key in values:
                    found[key] = format_plain_text(values[key], fmt)
    return found


def text_glues(messages: dict[str, list[str]] | None = None) -> set[tuple[str, str]]:
    """``{(glue key, English value)}``: the glued values with words that the messages show."""
    return {
        (key, value)
        for key, value in glue_roles(messages).items()
        if key not in NAME_GLUES and has_words(value)
    }


def glue_todo(wanted: set[tuple[str, str]] | None = None, cat=None) -> list[tuple[str, str]]:
    """The glued values with words that ``cat`` (default: glue.po) does not hold at all."""
    wanted = text_glues() if wanted is None else wanted
    if cat is None:
        cat = read(GLUE_CATALOG) if GLUE_CATALOG.exists() else None
    if cat is None:
        return sorted(wanted)
    return sorted((k, v) for k, v in wanted if cat.get(v, context=k) is None)


def merge_glue(cat, wanted: set[tuple[str, str]], used: set[str] | None = None):
    """glue.po brought up to ``wanted``: a new value of a key starts fuzzy with the key's old
    translation as a suggestion (or empty); an old value without digits stays (a closed set,
    "meets" / "misses": the other word comes back on another run) while its key is ``used``
    (default: a key of ``wanted``); an old value with digits (a sentence of figures) and
    every unused key go."""
    from babel.messages.catalog import Catalog

    new = Catalog(locale=LANGUAGE, project="Self-Attention, Executed: glued words")
    if cat is not None:
        new.creation_date = cat.creation_date
    keys = {k for k, _ in wanted} | (used or set())
    for key, value in sorted(wanted):
        old = cat.get(value, context=key) if cat is not None else None
        if old is not None:
            new.add(
                value,
                old.string,
                context=key,
                flags=old.flags,
                previous_id=old.previous_id,
                auto_comments=old.auto_comments,
            )
            continue
        before = [m for m in cat if m.id and m.context == key and m.string] if cat else []
        if before:
            new.add(
                value, before[-1].string, context=key, flags={"fuzzy"}, previous_id=[before[-1].id]
            )
        else:
            new.add(value, "", context=key)
    for m in cat or []:
        if (
            m.id
            and m.context in keys
            and (m.id, m.context) not in {(v, k) for k, v in wanted}
            and not re.search(r"\d", m.id)
            and m.string
            and not m.fuzzy
        ):
            new.add(m.id, m.string, context=m.context, auto_comments=["another run's value"])
    return new


def update_glue() -> None:
    """Bring ``locales/zh_CN/glue.po`` up to the glued words the catalogs show now."""
    cat = read(GLUE_CATALOG) if GLUE_CATALOG.exists() else None
    write(GLUE_CATALOG, merge_glue(cat, text_glues(), set(glue_roles())))


def glued_catalogs(out: Path) -> Path:
    """Copies of the catalogs with every ``{glue:text}`` role replaced by its value.

    Sphinx parses a translation again, in a document of its own that holds no glue data, so
    a glue role inside a translated message finds no value (myst-nb warns and renders
    nothing). The committed catalogs keep the roles (the translation tests check they
    survive); the build reads these copies, where each role is already the text it stands
    for: a number formatted exactly as myst-nb formats it from the value stored in the
    notebook, words as their translation in glue.po (an untranslated one stops the build).
    """
    from myst_nb.core.variables import format_plain_text

    words = read(GLUE_CATALOG) if GLUE_CATALOG.exists() else None
    target = out / LANGUAGE / "LC_MESSAGES"
    shutil.rmtree(out, ignore_errors=True)
    untranslated = set()
    for doc in documents():
        cat = read(catalog(doc))
        values = glue_values(doc)

        def fill(m: re.Match, values=values, doc=doc) -> str:
            key = m.group(1)
            if key not in values:
                raise KeyError(f"{doc}: glue key {key!r} has no stored value")
            value = format_plain_text(values[key], m.group(2) or "")
            if key in NAME_GLUES or not has_words(value):
                return value
            message = words.get(value, context=key) if words is not None else None
            if message is None or not message.string or message.fuzzy:
                untranslated.add((key, value))
                return value
            return message.string

        for message in cat:
            if message.id and message.string:
                message.string = GLUE_ROLE.sub(fill, message.string)
        path = target / f"{doc}.po"
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, cat)
    if untranslated:
        sys.exit(
            f"{len(untranslated)} glued values with words have no translation in "
            f"{GLUE_CATALOG.relative_to(ROOT)} (run `make translations`, then translate them), "
            "e.g. " + "; ".join(f"{k}: {v[:60]!r}" for k, v in sorted(untranslated)[:3])
        )
    return out


def config(out_dir: Path | None = None) -> dict:
    """_config.yml for the Chinese edition (same sources, language zh_CN)."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["title"] = TITLE
    cfg.setdefault("html", {})["extra_footer"] = FOOTER
    sphinx = cfg.setdefault("sphinx", {})
    conf = sphinx.setdefault("config", {})
    conf["language"] = LANGUAGE
    # The catalogs with glued values filled in (see glued_catalogs), next to the config.
    locales = glued_catalogs(out_dir or ROOT / "_build" / "zh" / "locales")
    conf["locale_dirs"] = [str(locales)]
    # Figures' alt texts and exercises' titles in Chinese (_ext/book_zh.py swaps them in).
    extras = locales / "extra_messages.json"
    extras.write_text(json.dumps(translated_extras(), ensure_ascii=False, indent=0) + "\n")
    conf["book_zh_extra_messages"] = str(extras)
    conf["book_edition_language"] = LANGUAGE
    # The Colab and download buttons open the Chinese notebook edition (notebooks/zh/, written
    # by tools/notebook_edition.py from these catalogs): its checkers speak Chinese.
    cfg.setdefault("repository", {})["path_to_book"] = ZH_NOTEBOOKS
    conf["book_notebook_edition"] = ZH_NOTEBOOKS
    # myst-nb's buttons on collapsed cells ("Show code cell source"), in Chinese too.
    conf["nb_code_prompt_show"] = "显示代码单元（{type}）"
    conf["nb_code_prompt_hide"] = "隐藏代码单元（{type}）"
    # Relative to the configuration file in Jupyter Book 1; this one is elsewhere.
    local = sphinx.get("local_extensions") or {}
    sphinx["local_extensions"] = {
        name: str((ROOT / path).resolve()) for name, path in local.items()
    }
    sphinx["local_extensions"]["book_zh"] = str((ROOT / "_ext").resolve())
    # Explorers and diagrams in Chinese (_ext/book_zh_widgets.py).
    sphinx["local_extensions"]["book_zh_widgets"] = str((ROOT / "_ext").resolve())
    return cfg


# ----------------------------------------------------------------------------- the library's
#: The library's own catalog (selfattn.i18n: the checkers' messages), shipped in the wheel.
LIBRARY_CATALOG = ROOT / "lib" / "selfattn" / "locale" / LANGUAGE / "LC_MESSAGES" / "selfattn.po"


def library_titles() -> list[tuple[str, str, str]]:
    """``(number, checker's English title, Chinese title)`` of every exercise that has a checker:
    the Chinese title is the book's (the chapter catalog's ``exercise`` context), so that a
    checker's line names the exercise as the Chinese page does."""
    import ast

    found = []
    for doc in documents():
        chapter = re.match(r"chapters/(\d\d)_", doc)
        module = (
            ROOT / "lib" / "selfattn" / "exercises" / f"ch{chapter.group(1)}.py"
            if chapter
            else None
        )
        if module is None or not module.exists():
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        labels = next(
            ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "EXERCISES" for t in node.targets)
        )
        checkers = {}
        for node in ast.walk(tree):
            for deco in getattr(node, "decorator_list", []):
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "checker":
                    label, title = (ast.literal_eval(a) for a in deco.args[:2])
                    checkers.setdefault(label, title)
        text = "\n".join(
            "".join(c["source"])
            for c in json.loads((ROOT / f"{doc}.ipynb").read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"
        )
        book = dict(
            (label, title)
            for title, label in re.findall(
                r"^[`:]{3,}\{exercise-start\}[ \t]*(\S.*?)\s*\n:label: ex-ch\d\d-(\S+)", text, re.M
            )
        )
        zh = {m.id: m.string for m in read(catalog(doc)) if m.context == EXERCISE_CONTEXT}
        for position, label in enumerate(labels, 1):
            if label in checkers and zh.get(book.get(label, "")):
                found.append(
                    (f"{int(chapter.group(1))}.{position}", checkers[label], zh[book[label]])
                )
    return found


def library_catalog():
    """The library's catalog: its hand-translated messages as they are, and the exercise titles
    (context ``exercise <number>``) from :func:`library_titles`."""
    cat = read(LIBRARY_CATALOG)
    cat.fuzzy = False  # the header: its messages are translated by hand or from the book
    for m in list(cat):
        if m.id and (m.context or "").startswith("exercise "):
            cat.delete(m.id, context=m.context)
    for number, title, zh in library_titles():
        cat.add(title, zh, context=f"exercise {number}")
    return cat


def library(check_only: bool = False) -> None:
    """Write (or, with ``check_only``, check) the library's catalog and its compiled ``.mo``."""
    from io import BytesIO

    from babel.messages.mofile import write_mo

    cat = library_catalog()
    po, mo = BytesIO(), BytesIO()
    write_po(po, cat, width=99, omit_header=False, sort_output=False)
    write_mo(mo, cat)
    wanted = {LIBRARY_CATALOG: po.getvalue(), LIBRARY_CATALOG.with_suffix(".mo"): mo.getvalue()}
    stale = [p for p, data in wanted.items() if not p.exists() or p.read_bytes() != data]
    if check_only:
        if stale:
            sys.exit(f"out of date (python tools/i18n.py library): {[str(p) for p in stale]}")
        return
    for path in stale:
        path.write_bytes(wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["update"]:
        update(argv[1:])
    elif argv == ["stats"]:
        stats()
    elif argv == ["check"]:
        check()
    elif argv[:1] == ["library"] and argv[1:] in ([], ["--check"]):
        library(check_only=argv[1:] == ["--check"])
    elif len(argv) == 3 and argv[0] == "todo":
        todo(argv[1], Path(argv[2]))
    elif len(argv) == 3 and argv[0] == "apply":
        apply(argv[1], Path(argv[2]))
    elif len(argv) == 2 and argv[0] == "config":
        out = Path(argv[1])
        out.parent.mkdir(parents=True, exist_ok=True)
        cfg = config(out.parent.resolve() / "locales")
        out.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
        print(f"wrote {out}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
