"""The Chinese edition: message catalogs from the English sources, and its configuration.

    python tools/i18n.py update [DOC...] # make translations: extract, then update the catalogs
    python tools/i18n.py stats           # translated / fuzzy / untranslated per catalog
    python tools/i18n.py check           # fail if the catalogs miss a message of the sources
    python tools/i18n.py config OUT.yml  # the zh_CN edition's Jupyter Book configuration
    python tools/i18n.py todo DOC OUT.json     # a document's messages left to translate
    python tools/i18n.py apply DOC IN.json     # write translations back into its catalog

Sphinx's own internationalisation: the gettext builder extracts every paragraph, heading,
list item, table cell, admonition and directive body of the book as a message; sphinx-intl
keeps one catalog per document under ``locales/zh_CN/LC_MESSAGES/`` (the intro and every
chapter; the API reference, generated from docstrings, stays English). When the English
changes, ``update`` adds the new messages (untranslated) and marks the changed ones fuzzy;
``tests/test_translations.py`` fails until each is translated and its fuzzy flag removed,
and ``check`` (run by ``make book-zh``) fails when the catalogs were not updated at all.
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
sys.path.insert(0, str(ROOT / "tools"))
from book import toc_files  # noqa: E402

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


def documents() -> list[str]:
    """The documents the Chinese edition translates, in book order."""
    return [d for d in toc_files() if d not in ENGLISH_ONLY]


def catalog(doc: str) -> Path:
    return CATALOGS / f"{doc}.po"


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
    stats()


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
    for doc in documents():
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
        wanted = {m.id for m in read(pots / f"{doc}.pot") if m.id}
        have = {m.id for m in read(catalog(doc)) if m.id} if catalog(doc).exists() else set()
        if wanted - have:
            missing[doc] = sorted(wanted - have)
    if missing:
        lines = [f"  {doc}: {len(ids)} new, e.g. {ids[0][:70]!r}" for doc, ids in missing.items()]
        sys.exit(
            "the English changed since the catalogs were updated: run `make translations`, "
            "translate the new messages, then rebuild\n" + "\n".join(lines)
        )
    print(f"catalogs current: {len(documents())} documents")


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
            items.append({"id": m.id, "text": text, "old": m.string if m.fuzzy else "", "zh": ""})
    out.write_text(json.dumps(items, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(items)} messages to translate -> {out}")


def apply(doc: str, source: Path) -> None:
    """Write the translations in ``source`` (:func:`todo`'s list with ``zh`` filled in, or
    ``[{"id", "str"}]`` with the final text) into the catalog, clearing fuzzy flags.
    Messages the catalog no longer has (the English changed since) are skipped and counted."""
    cat = read(catalog(doc))
    done, gone, bad = 0, 0, []
    for item in json.loads(source.read_text(encoding="utf-8")):
        message = cat.get(item["id"])
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


def glued_catalogs(out: Path) -> Path:
    """Copies of the catalogs with every ``{glue:text}`` role replaced by its value.

    Sphinx parses a translation again, in a document of its own that holds no glue data, so
    a glue role inside a translated message finds no value (myst-nb warns and renders
    nothing). The committed catalogs keep the roles (the translation tests check they
    survive); the build reads these copies, where each role is already the text it stands
    for, formatted exactly as myst-nb formats it from the values stored in the notebook.
    """
    sys.path.insert(0, str(ROOT / "tools"))
    from myst_nb.core.variables import format_plain_text
    from notebook_edition import _glue_values

    target = out / LANGUAGE / "LC_MESSAGES"
    shutil.rmtree(out, ignore_errors=True)
    for doc in documents():
        cat = read(catalog(doc))
        source = ROOT / f"{doc}.ipynb"
        values = _glue_values(json.loads(source.read_text())) if source.exists() else {}

        def fill(m: re.Match, values=values, doc=doc) -> str:
            if m.group(1) not in values:
                raise KeyError(f"{doc}: glue key {m.group(1)!r} has no stored value")
            return format_plain_text(values[m.group(1)], m.group(2) or "")

        for message in cat:
            if message.id and message.string:
                message.string = GLUE_ROLE.sub(fill, message.string)
        path = target / f"{doc}.po"
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, cat)
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
    conf["locale_dirs"] = [str(glued_catalogs(out_dir or ROOT / "_build" / "zh" / "locales"))]
    conf["book_edition_language"] = LANGUAGE
    # myst-nb's buttons on collapsed cells ("Show code cell source"), in Chinese too.
    conf["nb_code_prompt_show"] = "显示代码单元（{type}）"
    conf["nb_code_prompt_hide"] = "隐藏代码单元（{type}）"
    # Relative to the configuration file in Jupyter Book 1; this one is elsewhere.
    local = sphinx.get("local_extensions") or {}
    sphinx["local_extensions"] = {
        name: str((ROOT / path).resolve()) for name, path in local.items()
    }
    return cfg


def main(argv: list[str]) -> None:
    if argv[:1] == ["update"]:
        update(argv[1:])
    elif argv == ["stats"]:
        stats()
    elif argv == ["check"]:
        check()
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
