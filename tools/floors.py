"""The library at its dependencies' floors: the lowest versions pyproject.toml declares.

    python tools/floors.py [--venv /tmp/floors]      # make test-floors

pyproject.toml's bounds say which versions a reader's environment (Colab's, say) may keep.
This checks that they are true by running library tests with exactly those versions:

1. a venv of its own (``--venv``; kept between runs, so a second run installs nothing);
2. torch, numpy, matplotlib, ipywidgets, pillow and tqdm at exactly their declared floors
   (``name==floor``, read from pyproject.toml); pytest and hypothesis at their pins. torch
   at its floor is PyPI's CUDA build (about 5 GB with the ``nvidia-*`` wheels it needs, a
   minute or two to install from the package index here); it runs on the CPU. The table of
   tests/test_dependency_floors.py says which torch API sets that floor;
3. checks that pip installed those versions (a resolver that moved one would make the run
   prove nothing);
4. a wheel of the library (as tools/reader_run.py builds it), installed without its
   dependencies, so the tests import the package as a reader gets it, not lib/;
5. a subset of the library's tests (``TESTS``: attention, masks, multi-head attention,
   positions, the core tools and the explorers, about a minute on 2 cores), then a
   two-step training run with its tqdm progress bar on (the tests turn progress bars off).

Part of ``make test``: about three minutes on a fresh machine (most of it installing torch),
a minute once the venv exists.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
#: The distributions whose floors are installed exactly.
FLOORED = ("torch", "numpy", "matplotlib", "ipywidgets", "pillow", "tqdm")
#: Installed at requirements.txt's pins.
PINNED = ("pytest", "hypothesis")
TESTS = [
    "tests/test_attention.py",
    "tests/test_masks.py",
    "tests/test_multihead.py",
    "tests/test_positional.py",
    "tests/test_core_tools.py",
    "tests/test_widgets_explorer.py",
]
SMOKE = """
import torch, selfattn
model = torch.nn.Linear(2, 1)
batches = lambda step: (torch.ones(4, 2), torch.zeros(4, 1))
loss = lambda m, b: ((m(b[0]) - b[1]) ** 2).mean()
history = selfattn.train_loop(model, batches, loss, steps=2, lr=0.1, progress=True)
assert len(history) == 2, history
print("train_loop with a tqdm progress bar: ok")
"""


def floors() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for dep in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9.]*)", dep.strip())
        if not m:
            sys.exit(f"pyproject.toml: {dep!r} is not name>=version")
        found[m[1].lower()] = m[2]
    return found


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
        if m:
            found[m[1].lower()] = m[2]
    return found


def run(cmd: list, **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def _release(version: str) -> tuple[int, ...]:
    """``8.0`` and ``8.0.0`` alike, a local tag such as ``+cpu`` aside."""
    nums = [int(x) for x in re.findall(r"\d+", version.split("+")[0])]
    while nums and nums[-1] == 0:
        nums.pop()
    return tuple(nums)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--venv", type=Path, default=Path("/tmp/floors"))
    args = parser.parse_args(argv)
    want, pinned = floors(), pins()
    missing = [name for name in FLOORED if name not in want]
    if missing:
        sys.exit(f"pyproject.toml declares no floor for {missing}")
    python = args.venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", args.venv])
    exact = {name: want[name] for name in FLOORED} | {name: pinned[name] for name in PINNED}
    run(
        [python, "-m", "pip", "install", "-q"]
        + [f"{name}=={version}" for name, version in exact.items()]
        + ["pyyaml"]
    )
    got = subprocess.run(
        [
            python,
            "-c",
            "import sys, importlib.metadata as m; [print(n, m.version(n)) for n in sys.argv[1:]]",
            *exact,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    installed = dict(zip(got[::2], got[1::2]))
    wrong = [
        f"{n} {installed[n]} (wanted {v})"
        for n, v in exact.items()
        if _release(installed[n]) != _release(v)
    ]
    if wrong:
        sys.exit("pip did not install the floors: " + ", ".join(wrong))

    with tempfile.TemporaryDirectory() as tmp:
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                tmp,
                ROOT,
            ]
        )
        (wheel,) = Path(tmp).glob("selfattn-*.whl")
        run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel])
    where = subprocess.run(
        [python, "-c", "import selfattn; print(selfattn.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()
    if not where.startswith(str(args.venv)):
        sys.exit(f"selfattn imported from {where}, not from the venv's wheel")

    print("\nversions under test (pyproject.toml's floors):")
    for name in exact:
        print(f"  {name:<11} {installed[name]:<12} declared >= {want.get(name, '-')}")
    run([python, "-m", "pytest", "-p", "no:cacheprovider", "-q", *TESTS], cwd=ROOT)
    run([python, "-c", SMOKE], cwd=tempfile.gettempdir())
    print(f"\nmake test-floors: the library's tests pass at the floors ({', '.join(FLOORED)})")


if __name__ == "__main__":
    main(sys.argv[1:])
