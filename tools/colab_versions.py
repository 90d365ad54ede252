"""Colab's versions of the packages the book touches, as a pip constraints file.

    python tools/colab_versions.py FREEZE [--source TEXT]     # make colab-versions FREEZE=...

Google publishes the packages of Colab's runtime in googlecolab/backend-info
(``pip-freeze.gpu.txt``, and the Python version in ``os-info-gpu.txt``). This reads a copy of
that freeze, keeps the packages in :data:`PACKAGES` (what the chapters import, the kernel and
widget stack they run in, and the test runner), and writes them as exact pins to
``tools/colab_constraints.txt`` with where they came from. ``tools/reader_run.py`` builds its
second pass from that file (a reader's run on Colab's versions), so when Colab moves, rerun
this on the new freeze and run ``make test-notebooks``.

A pin Colab gives with a local tag (``torch==2.11.0+cu128``) is written without it: the tag
names a build on PyTorch's own index, which this machine cannot reach; PyPI's wheel of the same
release is built from the same source.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tools" / "colab_constraints.txt"

#: The packages mirrored, by their normalised name (PEP 503). The chapters import torch, numpy,
#: matplotlib, pillow, tqdm and ipywidgets (with widgetsnbextension and jupyterlab_widgets, the
#: frontend halves pip resolves with it); the notebook runs in ipykernel / IPython /
#: jupyter_client (traitlets, pyzmq, tornado, comm, matplotlib-inline, nest-asyncio beneath);
#: notebook is Colab's classic frontend package, which widgetsnbextension 3 depends on; pytest
#: is the runner nbval plugs into; triton is the version torch brings.
PACKAGES = (
    "torch",
    "triton",
    "numpy",
    "matplotlib",
    "matplotlib-inline",
    "pillow",
    "tqdm",
    "ipywidgets",
    "widgetsnbextension",
    "jupyterlab-widgets",
    "ipykernel",
    "ipython",
    "jupyter-client",
    "jupyter-core",
    "traitlets",
    "pyzmq",
    "tornado",
    "nest-asyncio",
    "nbformat",
    "notebook",
    "pytest",
)


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_freeze(text: str) -> dict[str, str]:
    """``{normalised name: version}`` from ``pip freeze`` lines (``name==version``)."""
    found = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
        if m:
            found[normalise(m[1])] = m[2]
    return found


def constraints(freeze: dict[str, str], source: str, python: str) -> str:
    missing = [name for name in PACKAGES if name not in freeze]
    if missing:
        raise SystemExit(f"colab_versions: Colab's list has no {', '.join(missing)}")
    lines = [
        "# Colab's versions of the packages the book touches (tools/colab_versions.py writes",
        "# this file; tools/reader_run.py's second pass installs exactly these, then the wheel).",
        f"# Source: {source}",
        f"# Colab's Python: {python}",
        f"# Written: {datetime.date.today().isoformat()}",
    ]
    for name in PACKAGES:
        version = freeze[name]
        if "+" in version:
            lines.append(f"# Colab: {name}=={version}; PyPI's build of the same release:")
            version = version.split("+")[0]
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"


def colab_python(path: Path = OUT) -> str:
    """Colab's Python version, as the constraints file records it (``3.13.15``)."""
    m = re.search(r"^# Colab's Python: (\S+)$", path.read_text(encoding="utf-8"), re.M)
    if not m:
        raise SystemExit(f"{path} does not say Colab's Python version")
    return m[1]


def read_constraints(path: Path = OUT) -> dict[str, str]:
    """The pins of a constraints file written by this tool."""
    return parse_freeze(path.read_text(encoding="utf-8"))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("freeze", type=Path, help="a copy of Colab's pip-freeze.gpu.txt")
    parser.add_argument(
        "--source",
        default=None,
        help="where the copy came from (default: the file's path)",
    )
    parser.add_argument(
        "--python",
        required=True,
        help="Colab's Python version (os-info-gpu.txt beside the freeze), e.g. 3.13.15",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    freeze = parse_freeze(args.freeze.read_text(encoding="utf-8"))
    text = constraints(freeze, args.source or str(args.freeze), args.python)
    args.out.write_text(text, encoding="utf-8")
    print(text, end="")


if __name__ == "__main__":
    main(sys.argv[1:])
