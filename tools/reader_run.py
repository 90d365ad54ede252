"""Run the chapters the way a Colab reader does, and check their outputs with strict nbval.

    python tools/reader_run.py                         # every chapter in _toc.yml
    python tools/reader_run.py chapters/07_*.ipynb     # just these
    python tools/reader_run.py --keep                  # keep the temporary folder, print it
    python tools/reader_run.py --paths native          # only this CPU's own floating-point path

A reader on Colab has one notebook and ``pip install selfattn @ git+...``: no repository,
no ``chapters/results`` folder beside the notebook, no editable install. This script
reproduces exactly that, then runs strict nbval on the copies:

1. builds a wheel of the library from this checkout (``pip wheel``);
2. creates a fresh virtual environment and installs the wheel into it; the pinned
   third-party packages (torch, matplotlib, nbval, ...) are reached through a ``.pth`` line
   to this checkout's ``.venv``, whose *editable* ``selfattn`` is never activated (a path
   added by a ``.pth`` line does not run that folder's own ``.pth`` files);
3. checks that ``import selfattn`` resolves to the wheel, not to ``lib/``;
4. copies each chapter alone into its own empty folder, with one cell appended that checks,
   after the whole notebook has run ("Run all"), that every name an exercise cell defines
   still holds the reader's own stub (the same function source, the same literal): no
   solution cell, run below it, has overwritten the reader's answer;
5. runs ``pytest --nbval`` on the copies with that environment's Python: every cell must
   run without error and reproduce its committed output (``tests/nbval_sanitize.cfg``).

So one pass proves both that the committed outputs reproduce and that every chapter runs
alone from the installed package (``make test-notebooks`` runs it).

Two floating-point paths. Another reader's CPU rounds differently (another instruction set,
another BLAS code path), and a GPU more so. The script runs every chapter twice: on this
machine's own path, and on a second one that stands for another machine (:data:`SECOND_PATH`:
PyTorch's unvectorised kernels and MKL's compatible code path, one thread as always). Both
passes run with claims raising (``SELFATTN_RECORD=1``) and strict nbval, so every committed
output and every claim must hold on both. After the first pass it prints each chapter's wall
time beside its budget (a benchmark: nothing fails on time). Recorded results are
written into the copies' folders, never into the repository. Whether the wheel declares
every package the library and chapters import is checked statically by
``tests/test_packaging.py``.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.results import SECOND_PATH  # noqa: E402

from tools.book import ROOT, toc_chapters  # noqa: E402

#: The second floating-point path is defined once, in the library (``selfattn.results``): each
#: of its settings changes a float32 training run's loss in its sixth digit
#: (tests/test_fp_paths.py shows it).
PATHS = {"native": {}, "second": SECOND_PATH}

#: The environment each pass runs in: ``book`` is this checkout's pinned one
#: (requirements.txt); ``colab`` starts from Colab's own versions (tools/colab_constraints.txt),
#: then installs the wheel as a chapter's setup cell does. The second pass stands for another
#: reader's machine, and the reader most likely to run the book elsewhere runs it on Colab:
#: other rounding and Colab's packages, together, in one pass (``--env`` overrides it).
ENVS = {"native": "book", "second": "colab"}
COLAB_CONSTRAINTS = ROOT / "tools" / "colab_constraints.txt"
#: Test tools the base environment adds to Colab's packages (Colab has pytest, not these).
TEST_TOOLS = ("nbval", "pytest-xdist", "hypothesis")


def colab_interpreter() -> Path:
    """A CPython of Colab's minor version (tools/colab_constraints.txt says which), else
    this one, with a line that says so. Looked for on PATH and in pyenv's versions."""
    import glob

    from tools.colab_versions import colab_python

    minor = ".".join(colab_python(COLAB_CONSTRAINTS).split(".")[:2])
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv"), "/root/.pyenv"]
    found = [shutil.which(f"python{minor}")] + [
        c
        for r in roots
        if r
        for c in sorted(glob.glob(f"{r}/versions/{minor}*/bin/python{minor}"))
    ]
    for candidate in filter(None, found):
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv, ssl; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.startswith(minor + "."):
            print(f"Colab's Python is {minor}: using {candidate} ({probe.stdout.strip()})")
            return Path(candidate)
    print(
        f"reader_run: no Python {minor} (Colab's) on this machine: Colab's package versions "
        f"run on this Python, {sys.version.split()[0]}",
        flush=True,
    )
    return Path(sys.executable)


#: A reader's time budget per chapter on 2 CPU cores (docs/design.md), by chapter number.
BUDGET_S = {n: 90 if 6 <= n <= 9 or 11 <= n <= 14 else 60 for n in range(1, 15)}


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def build_wheel(work: Path) -> Path:
    wheels = work / "wheel"
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", wheels, ROOT],
        cwd=work,
    )
    (wheel,) = wheels.glob("selfattn-*.whl")
    return wheel


def _purelib(python: Path) -> Path:
    return Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


def _versions(python: Path, names: list[str]) -> dict[str, str]:
    code = (
        "import sys, importlib.metadata as m\n"
        "for n in sys.argv[1:]:\n"
        "    try: print(n, m.version(n))\n"
        "    except m.PackageNotFoundError: print(n, '-')\n"
    )
    out = subprocess.run(
        [python, "-c", code, *names], check=True, capture_output=True, text=True
    ).stdout.split()
    return dict(zip(out[::2], out[1::2]))


def _check_wheel_import(python: Path, purelib: Path, work: Path) -> None:
    where = subprocess.run(
        [python, "-c", "import selfattn; print(selfattn.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=work,
    ).stdout.strip()
    if not Path(where).is_relative_to(purelib):
        sys.exit(f"reader_run: selfattn imported from {where}, not from the wheel in {purelib}")
    print(f"selfattn from the wheel: {where}", flush=True)


def colab_base(venv: Path) -> Path:
    """A venv holding exactly Colab's versions (tools/colab_constraints.txt) and the test
    tools; kept between runs at ``venv``, keyed by the constraints file, and rebuilt when that
    file changes. Returns its python."""
    import hashlib

    from tools.colab_versions import read_constraints

    pins = read_constraints(COLAB_CONSTRAINTS)
    interpreter = colab_interpreter()
    key = hashlib.sha256(COLAB_CONSTRAINTS.read_bytes() + bytes(interpreter)).hexdigest()[:16]
    python, stamp = venv / "bin" / "python", venv / ".constraints"
    venv.parent.mkdir(parents=True, exist_ok=True)
    # Two runs at once (two developers) build it once: the second waits for the first.
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == key):
            _install_colab_base(venv, pins, key, interpreter)
    return python


def _install_colab_base(venv: Path, pins: dict[str, str], key: str, interpreter: Path) -> None:
    python, stamp = venv / "bin" / "python", venv / ".constraints"
    shutil.rmtree(venv, ignore_errors=True)
    run([interpreter, "-m", "venv", venv])
    from tools.floors import pins as book_pins  # not `pins`: that name is Colab's versions here

    ours = {n: v for n, v in book_pins().items() if n in TEST_TOOLS}
    run(
        [python, "-m", "pip", "install", "-q", "-r", COLAB_CONSTRAINTS]
        + [f"{n}=={v}" for n, v in ours.items()]
    )
    got = _versions(python, list(pins))
    wrong = [f"{n} {got[n]} (Colab: {v})" for n, v in pins.items() if got[n] != v]
    if wrong:
        sys.exit("reader_run: pip did not install Colab's versions: " + ", ".join(wrong))
    stamp.write_text(key)


def build_colab_env(work: Path, wheel: Path, base_venv: Path) -> Path:
    """A fresh venv over Colab's versions (:func:`colab_base`, reached through a ``.pth``
    line), into which the wheel is installed as the setup cell installs it: a plain
    ``pip install`` with its dependencies, so pip upgrades whatever of Colab's packages the
    library's declared floors reject (ipywidgets 7.7.1, as on Colab), into this venv only.
    Prints each of Colab's versions before and after; returns the venv's python."""
    base = colab_base(base_venv)
    venv = work / "venv-colab"
    run([base.resolve(), "-m", "venv", venv])
    python = venv / "bin" / "python"
    purelib = _purelib(python)
    (purelib / "_colab_base.pth").write_text(str(_purelib(base)) + "\n")
    from tools.colab_versions import read_constraints

    names = list(read_constraints(COLAB_CONSTRAINTS))
    before = _versions(python, names)
    run([python, "-m", "pip", "install", "-q", wheel])
    after = _versions(python, names)
    print("\nColab's versions, and what installing the wheel changed (as on Colab):")
    for name in names:
        change = "" if before[name] == after[name] else f" -> {after[name]}"
        print(f"  {name:<20} {before[name]}{change}")
    _check_wheel_import(python, purelib, work)
    # The library's own tests there too (the subset tools/floors.py runs at the floors).
    from tools.floors import TESTS

    print("\nthe library's tests on Colab's versions and Python:", flush=True)
    run([python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", *TESTS], cwd=ROOT)
    return python


def build_reader_env(work: Path, wheel: Path) -> Path:
    """A fresh venv with the selfattn wheel installed; returns its python."""
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    purelib = _purelib(python)
    run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
        + ["--target", purelib, wheel]
    )
    here = sysconfig.get_paths()["purelib"]
    (purelib / "_book_environment.pth").write_text(here + "\n")
    _check_wheel_import(python, purelib, work)
    return python


_EXERCISE_TAG = re.compile(r"\{(exercise-start|exercise-end|solution-start|solution-end)\}")


def reader_stubs(nb: dict) -> tuple[dict[str, str], dict[str, str]]:
    """What the exercise cells define: ``({function: its source}, {name: literal source})``."""
    functions, literals, state = {}, {}, None
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            tags = _EXERCISE_TAG.findall(source)
            state = tags[-1] if tags else state
            continue
        if cell["cell_type"] != "code" or state != "exercise-start":
            continue
        tree = ast.parse(source)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                # Whole lines, decorators and trailing comments included, as inspect.getsource
                # returns them.
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                functions[node.name] = "\n".join(source.splitlines()[first - 1 : node.end_lineno])
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                try:
                    ast.literal_eval(node.value)
                except ValueError:
                    continue
                if isinstance(target, ast.Name):
                    literals[target.id] = ast.get_source_segment(source, node.value)
    return functions, literals


def stub_guard_cell(nb: dict) -> dict | None:
    """A last code cell that fails if "Run all" left any exercise name not the reader's stub."""
    functions, literals = reader_stubs(nb)
    if not functions and not literals:
        return None
    source = (
        "# Added by tools/reader_run.py: after Run all, the reader's answers are untouched.\n"
        "import ast as _ast\n"
        "import inspect as _inspect\n"
        f"for _name, _src in {functions!r}.items():\n"
        "    _got = _inspect.getsource(globals()[_name]).strip()\n"
        "    assert _got == _src.strip(), f'{_name} is no longer the reader stub'\n"
        f"for _name, _src in {literals!r}.items():\n"
        "    _want = _ast.literal_eval(_src)\n"
        "    assert globals()[_name] == _want, f'{_name} is no longer the reader value'\n"
    )
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": "reader-run-stub-guard",
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def copy_alone(chapters: list[Path], work: Path) -> list[Path]:
    """Each chapter in an empty folder of its own, as a reader who downloaded it has it,
    with the stub guard (:func:`stub_guard_cell`) appended."""
    copies = []
    for path in chapters:
        folder = work / "reader" / path.stem
        folder.mkdir(parents=True)
        nb = json.loads(path.read_text(encoding="utf-8"))
        guard = stub_guard_cell(nb)
        if guard is not None:
            nb["cells"].append(guard)
        copy = folder / path.name
        copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
        copies.append(copy)
    return copies


def chapter_times(junit: Path) -> dict[str, float]:
    """``{notebook stem: seconds}``: the sum of each chapter's cell times in a pytest report."""
    times: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        stem = Path(case.get("file") or case.get("classname", "").replace(".", "/")).stem
        times[stem] += float(case.get("time", 0.0))
    return dict(times)


def print_budget_table(times: dict[str, float]) -> None:
    """Each chapter's wall time (its cells, one kernel) beside its budget."""
    print("\nreader run, one kernel per chapter (cells' wall time; budget from docs/design.md):")
    print(f"  {'chapter':32} {'time':>7} {'budget':>7}  within")
    for stem, seconds in sorted(times.items()):
        budget = BUDGET_S.get(int(stem[:2]), 60) if stem[:2].isdigit() else 60
        within = "yes" if seconds <= budget else "NO"
        print(f"  {stem:32} {seconds:6.0f}s {budget:6d}s  {within}")
    print(flush=True)


def run_pass(
    python: Path, chapters: list[Path], work: Path, name: str, workers: str, env_name: str
) -> int:
    """Strict nbval on fresh copies of ``chapters`` on one floating-point path, in the
    environment ``env_name`` (``python``'s)."""
    folder = work / f"reader-{name}"
    copies = copy_alone(chapters, folder)
    # nbval skips images; a figure's SVG copy too (tests/nbval_figures.py says why).
    shutil.copyfile(ROOT / "tests" / "nbval_figures.py", folder / "reader" / "conftest.py")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env |= {"SELFATTN_PROGRESS": "0", "SELFATTN_RECORD": "1", **PATHS[name]}
    env.pop("SELFATTN_RECORD_TO", None)
    junit = folder / "report.xml"
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env"]
    cmd += ["--nbval-cell-timeout=900", "--nbval-sanitize-with"]
    cmd += [ROOT / "tests" / "nbval_sanitize.cfg", "-q", "--rootdir", folder / "reader"]
    cmd += ["--junitxml", junit, "-o", "junit_family=xunit1"]
    if workers not in {"0", "1"} and len(copies) > 1:
        cmd += ["-n", workers, "--dist", "loadfile"]
    shown = " ".join(f"{k}={v}" for k, v in PATHS[name].items()) or "this CPU's own"
    where = "Colab's versions" if env_name == "colab" else "the book's pinned versions"
    print(f"\n=== floating-point path {name!r} ({shown}), {where} ===", flush=True)
    result = subprocess.run([str(c) for c in cmd + copies], cwd=folder / "reader", env=env)
    if name == "native" and junit.exists():
        print_budget_table(chapter_times(junit))
    return result.returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers (default 2)")
    parser.add_argument(
        "--paths",
        default="native,second",
        help="floating-point paths to run, comma-separated: native, second (default both)",
    )
    parser.add_argument(
        "--env",
        choices=("book", "colab"),
        default=None,
        help="run every pass in this environment (default: native in book, second in colab)",
    )
    parser.add_argument(
        "--colab-venv",
        type=Path,
        default=Path(os.environ.get("COLAB_VENV", Path(tempfile.gettempdir()) / "colab-venv")),
        help="where the venv of Colab's versions is kept between runs (env COLAB_VENV)",
    )
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown or not paths:
        parser.error(f"--paths takes {sorted(PATHS)}, got {args.paths!r}")
    chapters = [p.resolve() for p in args.notebooks] or toc_chapters()
    if not chapters:
        print("reader_run: no chapter in _toc.yml yet")
        return 0
    work = Path(tempfile.mkdtemp(prefix="selfattn-reader-"))
    try:
        wheel = build_wheel(work)
        envs = {name: args.env or ENVS[name] for name in paths}
        pythons = {}
        if "book" in envs.values():
            pythons["book"] = build_reader_env(work, wheel)
        if "colab" in envs.values():
            pythons["colab"] = build_colab_env(work, wheel, args.colab_venv)
        failed = [
            name
            for name in paths
            if run_pass(pythons[envs[name]], chapters, work, name, args.workers, envs[name])
        ]
        if failed:
            print(f"reader_run: strict nbval failed on the path(s) {failed}")
        return 1 if failed else 0
    finally:
        if args.keep:
            print(f"reader_run: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
