"""Write the configuration of the student edition: the book with every exercise's solution removed.

    python tools/student_edition.py _build/student/_config.yml
    jupyter-book build . --config _build/student/_config.yml --path-output _build/student

`make book-student` runs both and moves the site to _build/student/html. The edition is
_config.yml with ``book_student_edition`` switched on (see _ext/book_site.py: it removes
every solution from the pages, the gated ``{solution-start}`` ... ``{solution-end}`` code
cells included; sphinx-exercise's own ``hide_solutions`` leaves gated solutions' code on
the page and then crashes), the title marked, and the folders the configuration names made
absolute, since this file lives outside the book's root.

It also writes the notebook editions (tools/notebook_edition.py): ``student/chapters/``, the
plain-Jupyter chapters without their solution cells (nbconvert's TagRemovePreprocessor drops
every cell tagged ``solution``), which the student edition's Colab button opens and its
pages offer as the ``.ipynb`` download, and ``notebooks/chapters/``, the same with solutions.
In both, a "predict, then run" cell (tagged ``predict``) has no saved output: the reader sees
the answer by running it, after predicting (on the website it is collapsed, _ext/book_site.py).
Exercises are numbered ``chapter.position`` as on the website and in the checkers' lines.
Check that they are current with

    python tools/student_edition.py --check
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
STUDENT = ROOT / "student"  # the student notebooks, at the same paths as in the book
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.notebook_edition import editions, stale, write  # noqa: E402


def student_config() -> dict:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["title"] = f"{cfg['title']} (student edition)"
    sphinx = cfg.setdefault("sphinx", {})
    sphinx.setdefault("config", {})["book_student_edition"] = True
    sphinx["config"]["book_language_switch"] = False  # no Chinese student edition
    # Relative to the configuration file in Jupyter Book 1; this one is elsewhere.
    local = sphinx.get("local_extensions") or {}
    sphinx["local_extensions"] = {
        name: str((ROOT / path).resolve()) for name, path in local.items()
    }
    # The Colab button opens <repository>/blob/<branch>/<path_to_book>/<page>.ipynb: the
    # solution-free plain notebooks under student/ instead of the full edition's.
    cfg.setdefault("repository", {})["path_to_book"] = STUDENT.name
    sphinx["config"]["book_notebook_edition"] = STUDENT.name
    return cfg


def student_notebooks() -> dict[Path, str]:
    """Each chapter's student notebook: its path under student/ and its text."""
    return {p: t for p, t in editions().items() if p.is_relative_to(STUDENT)}


def main(argv: list[str]) -> None:
    if argv == ["--check"]:
        wrong = stale()
        if wrong:
            sys.exit(f"out of date (run make notebooks): {wrong}")
        return
    if len(argv) != 1:
        sys.exit("usage: python tools/student_edition.py OUTPUT_CONFIG.yml | --check")
    write()
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(student_config(), sort_keys=False, allow_unicode=True))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
