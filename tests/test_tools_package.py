"""``tools/`` is a package (issue 53, point 5): ``python -m tools.NAME`` and ``python
tools/NAME.py`` both run a tool, nothing in tools/ or the tests edits ``sys.path``, and the
library never reads tools/ at run time."""

import ast
import re
import subprocess
import sys

import pytest

from tools.book import ROOT

TOOLS = sorted((ROOT / "tools").glob("*.py"))
# A sibling import: `from tools import x`, `from tools.x import y`, `import tools.x`.
SIBLING = re.compile(r"^\s*(from tools[. ]|import tools\.)", re.M)
GUARD = "_script.run_as_module(__file__)"


def _sys_path_edits(path):
    """Lines of ``path`` that change ``sys.path`` (insert, append, extend, slice assignment)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            target = next((t.value for t in targets if isinstance(t, ast.Subscript)), None)
            target = target or next((t for t in targets if isinstance(t, ast.Attribute)), None)
        if ast.unparse(target) == "sys.path" if target is not None else False:
            found.append(f"{path.parent.name}/{path.name}:{node.lineno}")
    return found


def test_nothing_in_tools_or_the_tests_edits_sys_path():
    files = [*TOOLS, *(ROOT / "tests").glob("*.py"), *(ROOT / "tests_site").glob("*.py")]
    edits = [line for path in files for line in _sys_path_edits(path)]
    assert not edits, edits


def test_a_sys_path_edit_is_found(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\n")
    assert len(_sys_path_edits(probe)) == 2


def test_every_tool_that_imports_a_sibling_runs_as_a_file_too():
    missing = []
    for path in TOOLS:
        text = path.read_text(encoding="utf-8")
        if SIBLING.search(text) and '__name__ == "__main__"' in text:
            guard, first = text.find(GUARD), SIBLING.search(text).start()
            if guard < 0 or guard > first:
                missing.append(path.name)
    assert not missing, f"no `python tools/NAME.py` guard before the sibling imports: {missing}"


def test_no_tool_imports_a_sibling_by_its_bare_name():
    """``from _precompute import ...`` works only in the file form: ``python -m tools.NAME``
    (and so ``SELFATTN_LIVE=1``, which runs the studies that way) needs ``from tools...``."""
    names = {p.stem for p in TOOLS}
    bare = []
    for path in TOOLS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                found = [node.module] if node.module in names else []
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name in names]
            else:
                continue
            if found and not (found == ["_script"] and path.stem != "_script"):
                bare.append(f"{path.name}:{node.lineno} {found}")
    assert not bare, f"import these as `from tools import ...`: {bare}"


@pytest.mark.parametrize("form", ["module", "file"])
def test_a_tool_runs_in_both_forms_from_another_folder(form, tmp_path):
    """apply_setup_cell imports tools.book: as `-m` from the root, as a file from anywhere."""
    if form == "module":
        command, cwd = [sys.executable, "-m", "tools.apply_setup_cell", "--help"], ROOT
    else:
        command = [sys.executable, str(ROOT / "tools" / "apply_setup_cell.py"), "--help"]
        cwd = tmp_path
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert proc.stdout.startswith("usage:")


def test_the_library_never_reads_tools():
    """No path into tools/ in the library: a recorded study is a command (``python -m
    tools.NAME``) that ``SELFATTN_LIVE=1`` starts in the reader's clone."""
    offenders = []
    for path in (ROOT / "lib" / "selfattn").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in ("tools", "tools/"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in getattr(node, "names", [])]
                if any(n == "tools" or n.startswith("tools.") for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
