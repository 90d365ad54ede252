"""Facts about the book that the Makefile, the tools and the tests share.

python tools/book.py chapters     # the chapter notebooks listed in _toc.yml, one per line
python tools/book.py setup-cell   # the canonical setup cell every chapter opens with
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def repository() -> tuple[str, str]:
    """(url, branch) of the repository named in _config.yml."""
    repo = config()["repository"]
    return repo["url"].rstrip("/"), repo.get("branch", "main")


def _walk(entries):
    for entry in entries or []:
        if "file" in entry:
            yield entry["file"]
        yield from _walk(entry.get("sections"))
        for part in entry.get("parts", []) or []:
            yield from _walk(part.get("chapters"))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    files += list(_walk(toc.get("chapters")))
    for part in toc.get("parts", []) or []:
        files += list(_walk(part.get("chapters")))
    return files


def toc_chapters() -> list[Path]:
    """Notebooks under chapters/ that the table of contents lists, in book order."""
    return [ROOT / f"{f}.ipynb" for f in toc_files() if f.startswith("chapters/")]


def chapter(number: int) -> Path:
    """The notebook of chapter ``number`` (1-based, in the table of contents' order)."""
    chapters = toc_chapters()
    if not 1 <= number <= len(chapters):
        raise ValueError(f"the book has chapters 1 to {len(chapters)}, not {number}")
    return chapters[number - 1]


def chapter_titles() -> dict[str, str]:
    """``{"ch01": "1. Why self-attention", ...}``: every chapter in book order, by the name its
    recorder uses (``ch`` and the notebook's two-digit number), with its heading."""
    titles = {}
    for path in toc_chapters():
        first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
        heading = "".join(first["source"]).splitlines()[0]
        titles[f"ch{path.stem[:2]}"] = heading.lstrip("# ").strip()
    return titles


#: The chapter registry shipped with the library (``selfattn.chapter_titles()`` reads it):
#: chapters/results/ is the package data ``selfattn.recorded``. ``make notebooks`` writes it.
REGISTRY = ROOT / "chapters" / "results" / "toc.json"


def registry_text() -> str:
    return json.dumps(chapter_titles(), indent=1, ensure_ascii=False) + "\n"


#: Packages a Colab runtime may have imported before the setup cell runs, and that installing
#: selfattn can upgrade (its floors, pyproject.toml): a module already imported stays the old
#: version in memory until the runtime restarts. Each module's name is its distribution's.
COLAB_PREIMPORTED = ("ipywidgets", "numpy", "matplotlib", "torch")


def setup_cell_source() -> str:
    """The first code cell of every chapter (tools/apply_setup_cell.py writes it into them).

    On Colab it installs selfattn from the repository in _config.yml, then turns on Colab's
    custom widget manager: the explorers are ipywidgets 8 widgets (``Stack``, which the static
    website needs), and Colab's own frontend draws only ipywidgets 7 (Colab ships 7.7.1)
    unless that manager is enabled. If the install upgraded a package the runtime had already
    imported (Colab's ipywidgets 7.7.1 is the likely one), the old version would stay in
    memory: the cell stops and tells the reader to restart the session and run it again (the
    second run installs nothing). Elsewhere the two Colab-only parts are skipped, so the cell
    prints nothing and its saved outputs do not change. The install line stays
    ``%pip install -q git+<url>@<ref>``, which tools/release.py pins to a release tag.
    """
    url, branch = repository()
    names = ", ".join(f'"{name}"' for name in COLAB_PREIMPORTED)
    return (
        "# Setup, the same in every chapter. On Colab it installs the book's library.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    from importlib.metadata import version\n"
        "\n"
        "    before = {\n"
        '        name: getattr(sys.modules.get(name), "__version__", None)\n'
        f"        for name in ({names})\n"
        "    }\n"
        # A bare VCS URL (pip reads the name from the project): the line fits 79 columns.
        f"    %pip install -q git+{url}@{branch}\n"
        "    # Colab draws ipywidgets 8 (the explorers) with its custom widget manager.\n"
        "    from google.colab import output\n"
        "\n"
        "    output.enable_custom_widget_manager()\n"
        "    stale = [n for n, v in before.items() if v and v != version(n)]\n"
        "    if stale:\n"
        "        sys.exit(\n"
        "            f\"Installing selfattn upgraded {', '.join(stale)}, which this \"\n"
        '            "session had already imported. Restart the session (Runtime > "\n'
        '            "Restart session), then run this cell again."\n'
        "        )\n"
        "\n"
        "import selfattn\n"
        "\n"
        "device = selfattn.setup(seed=0)"
    )


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "chapters"
    if what == "chapters":
        print("\n".join(str(p.relative_to(ROOT)) for p in toc_chapters()))
    elif what == "setup-cell":
        print(setup_cell_source())
    else:
        sys.exit(f"unknown request {what!r}; use 'chapters' or 'setup-cell'")
