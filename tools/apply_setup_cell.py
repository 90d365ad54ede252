"""Write the canonical setup cell (``tools/book.py setup-cell``) into the chapters.

    python tools/apply_setup_cell.py              # every chapters/*.ipynb
    python tools/apply_setup_cell.py --check      # list the chapters whose setup cell differs
    python tools/apply_setup_cell.py PATH ...     # only these notebooks (e.g. a copy)

Every chapter opens with the same setup cell (tests/test_notebooks.py checks it byte for
byte). After ``setup_cell_source`` in tools/book.py changes, this rewrites the *source* of each
notebook's first code cell and nothing else: its outputs, execution count, id and metadata,
every other cell and the notebook's JSON layout stay as they were, so nothing needs to be
re-executed (the cell prints nothing off Colab, before and after). It refuses a notebook whose
first code cell is not a setup cell (one that installs selfattn with ``%pip`` and calls
``selfattn.setup``). Then ``make notebooks`` brings the notebook editions (notebooks/ and
student/, generated from the chapters) up to date.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from tools.book import setup_cell_source  # noqa: E402


def _dump(nb: dict) -> str:
    # The layout nbformat (and so Jupyter and tools/execute.py) writes the chapters in.
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def _setup_cell(nb: dict, path: Path) -> dict:
    first = next((c for c in nb["cells"] if c["cell_type"] == "code"), None)
    source = "".join(first["source"]) if first else ""
    if "%pip install -q git+" not in source or "selfattn.setup(" not in source:
        sys.exit(f"{path}: its first code cell is not a setup cell; left unchanged")
    return first


def rewrite(path: Path, cell: str) -> bool:
    """Give ``path``'s setup cell the source ``cell``; True if the file changed."""
    raw = path.read_text(encoding="utf-8")
    nb = json.loads(raw)
    if _dump(nb) != raw:
        sys.exit(f"{path}: not in nbformat's JSON layout; rewriting it would change more")
    first = _setup_cell(nb, path)
    if "".join(first["source"]) == cell:
        return False
    first["source"] = cell.splitlines(keepends=True)
    # Write beside it, then rename: a reader of the notebook never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(_dump(nb))
    os.replace(tmp, path)
    return True


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: chapters/)")
    parser.add_argument("--check", action="store_true", help="only list what would change")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "chapters").glob("*.ipynb"))
    cell = setup_cell_source()
    if args.check:
        stale = []
        for path in paths:
            nb = json.loads(path.read_text(encoding="utf-8"))
            if "".join(_setup_cell(nb, path)["source"]) != cell:
                stale.append(str(path))
        if stale:
            sys.exit(
                "setup cell differs from tools/book.py setup-cell in:\n  " + "\n  ".join(stale)
            )
        print(f"{len(paths)} notebooks: the setup cell is canonical")
        return
    changed = [path for path in paths if rewrite(path, cell)]
    for path in changed:
        print(f"rewrote the setup cell of {path}")
    print(f"{len(changed)} of {len(paths)} notebooks changed (source only; outputs kept)")
    if changed:
        print("Next: `make notebooks` (the notebook editions follow the chapters)")


if __name__ == "__main__":
    main(sys.argv[1:])
