"""Write the configuration of the student edition: the book with every exercise's solution removed.

    python tools/student_edition.py _build/student/_config.yml
    jupyter-book build . --config _build/student/_config.yml --path-output _build/student

`make book-student` runs both and moves the site to _build/student/html. The edition is
_config.yml with ``book_student_edition`` switched on (see _ext/book_site.py: it removes
every solution from the pages, the gated ``{solution-start}`` ... ``{solution-end}`` code
cells included, and from the downloadable notebooks; sphinx-exercise's own
``hide_solutions`` leaves gated solutions' code on the page and then crashes), the title
marked, and the folders the configuration names made absolute, since this file lives
outside the book's root.

It also writes the solution-free chapter notebooks to ``student/chapters/`` (committed:
the student edition's "launch in Colab" button opens them from the repository, because its
configuration says the book lives under ``student/``). Check that they are current with

    python tools/student_edition.py --check
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
STUDENT = ROOT / "student"  # the student notebooks, at the same paths as in the book
sys.path.insert(0, str(ROOT / "_ext"))
from book_site import strip_solutions  # noqa: E402  (the same stripping as the site's)


def student_config() -> dict:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["title"] = f"{cfg['title']} (student edition)"
    sphinx = cfg.setdefault("sphinx", {})
    sphinx.setdefault("config", {})["book_student_edition"] = True
    # Relative to the configuration file in Jupyter Book 1; this one is elsewhere.
    local = sphinx.get("local_extensions") or {}
    sphinx["local_extensions"] = {
        name: str((ROOT / path).resolve()) for name, path in local.items()
    }
    # The Colab button opens <repository>/blob/<branch>/<path_to_book>/<page>.ipynb: the
    # solution-free copies under student/ instead of the full chapters.
    path = str(cfg.setdefault("repository", {}).get("path_to_book") or "").strip("/")
    cfg["repository"]["path_to_book"] = "/".join(p for p in (path, STUDENT.name) if p)
    return cfg


def student_notebooks() -> dict[Path, str]:
    """Each chapter's student notebook: its path under student/ and its text."""
    out = {}
    for src in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")):
        nb = strip_solutions(json.loads(src.read_text(encoding="utf-8")))
        text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        out[STUDENT / "chapters" / src.name] = text
    return out


def write_student_notebooks() -> None:
    expected = student_notebooks()
    folder = STUDENT / "chapters"
    folder.mkdir(parents=True, exist_ok=True)
    for stale in set(folder.glob("*.ipynb")) - set(expected):
        stale.unlink()
    for path, text in expected.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(expected)} student notebooks to {folder.relative_to(ROOT)}/")


def main(argv: list[str]) -> None:
    if argv == ["--check"]:
        expected = student_notebooks()
        present = set((STUDENT / "chapters").glob("*.ipynb"))
        wrong = [p for p, t in expected.items() if not p.exists() or p.read_text() != t]
        wrong += sorted(present - set(expected))
        if wrong:
            sys.exit(f"out of date (run make book-student): {[str(p) for p in wrong]}")
        return
    if len(argv) != 1:
        sys.exit("usage: python tools/student_edition.py OUTPUT_CONFIG.yml | --check")
    write_student_notebooks()
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(student_config(), sort_keys=False, allow_unicode=True))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
