"""The installed package stands alone: what it imports, it declares; what chapters read, it ships.

A Colab reader installs ``selfattn`` from the repository and runs one chapter. Every
third-party module that the library or a chapter imports must therefore be a declared
dependency of the package (``pyproject.toml``), or come with one, or be an optional extra
imported behind a guard. (``tools/reader_run.py``, run by ``make test-notebooks``, then runs
every chapter from a built wheel in an empty folder.)
"""

from __future__ import annotations

import ast
import json
import re
import sys

import pytest

from tools.book import ROOT, toc_chapters

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the pinned environment has it

# Import name -> the distribution that provides it, where they differ.
DISTRIBUTION = {"IPython": "ipython", "yaml": "pyyaml", "PIL": "pillow"}
# Provided by a declared dependency: ipywidgets depends on IPython.
COMES_WITH = {"ipython": "ipywidgets"}
# Imported only behind a guard (try/except ImportError or the optional extra); google.colab
# only by the setup cell, on Colab (which ships it); matplotlib_inline only where the book is
# recorded in a Jupyter kernel (whose ipykernel brings it), to save figures as SVG too.
OPTIONAL = {"triton", "myst_nb", "google", "matplotlib_inline", "transformers"}


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    return names


def imported_modules(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party(modules: set[str]) -> set[str]:
    return {m for m in modules if m not in sys.stdlib_module_names and m != "selfattn"}


def library_imports() -> set[str]:
    found = set()
    for path in (ROOT / "lib" / "selfattn").rglob("*.py"):
        found |= imported_modules(path.read_text())
    return third_party(found)


def chapter_imports() -> set[str]:
    found = set()
    for path in toc_chapters():
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                # IPython magics (%pip) are not Python: parse them as `pass` at their indent.
                code = re.sub(r"^(\s*)[%!].*$", r"\1pass", "".join(cell["source"]), flags=re.M)
                found |= imported_modules(code)
    return third_party(found)


def test_every_imported_package_is_declared():
    deps = declared()
    missing = []
    for module in sorted((library_imports() | chapter_imports()) - OPTIONAL):
        dist = DISTRIBUTION.get(module, module).lower()
        if dist not in deps and COMES_WITH.get(dist) not in deps:
            missing.append(f"{module} (distribution {dist})")
    assert not missing, (
        "imported by the library or a chapter but not in pyproject.toml's dependencies: "
        + ", ".join(missing)
    )


def test_recorded_results_are_package_data():
    toml = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert toml["package-dir"]["selfattn.recorded"] == "chapters/results"
    assert "selfattn.recorded" in toml["packages"]
    packages = {
        "selfattn" + ("." + ".".join(p.parent.relative_to(ROOT / "lib/selfattn").parts))
        if p.parent != ROOT / "lib/selfattn"
        else "selfattn"
        for p in (ROOT / "lib/selfattn").rglob("__init__.py")
    }
    assert packages <= set(toml["packages"]), (
        f"packages missing from pyproject.toml: {sorted(packages - set(toml['packages']))}"
    )
