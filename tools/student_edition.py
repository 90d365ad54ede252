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
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


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
    return cfg


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python tools/student_edition.py OUTPUT_CONFIG.yml")
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(student_config(), sort_keys=False, allow_unicode=True))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
