"""The lower bounds in pyproject.toml say what the code really needs.

A Colab reader installs ``selfattn`` on top of Colab's own packages (torch 2.11, numpy 2.1,
matplotlib 3.10, ipywidgets 7.7.1 in August 2026), and pip keeps every installed package that
meets the declared bound. So each bound must be the oldest version the code works with.

**torch, by a table and by running.** ``make test-floors`` (part of ``make test``) installs
torch at its declared floor (PyPI's CUDA build, about 5 GB with its ``nvidia-*`` wheels; it
runs on the CPU) and runs library tests with it. Which API sets that floor is said here: every
torch API the library, the tools and the chapters use that is newer than torch 2.0 is listed
in ``TORCH_USED`` (the table), with the release that introduced it in ``TORCH_NEW`` (a
catalogue of torch APIs newer than 2.0, used or not) and where that release is written down
(PyTorch's versioned documentation and release notes), and

* a use of a torch API the catalogue lists, or of anything under a namespace torch 2.0 did not
  have (``TORCH_NEW_NAMESPACES``), that the table does not list fails, so the table cannot
  fall behind the code;
* a table entry the code no longer uses fails, so the floor does not stay high for nothing;
* ``pyproject.toml``'s torch floor must be the newest release in the table.

Uses are found by reading the code (the AST), resolving import aliases (``import torch.nn.
functional as F``, ``from torch.nn.attention import sdpa_kernel``) and the keyword arguments
of calls (``F.scaled_dot_product_attention(..., enable_gqa=True)``). A method called on a
tensor or a module, or a name reached through ``getattr``, is not seen: when this table was
written, every such method name the code uses (``untyped_storage``, ``nan_to_num``, ...)
was older than torch 2.0.

**numpy, matplotlib, ipywidgets, pillow, tqdm, by running.** ``make test-floors``
(tools/floors.py) installs exactly the floors pyproject.toml declares, torch's too, in a venv
of their own and runs a subset of the library's tests there. The two APIs that set the
ipywidgets and pillow floors are checked below as well.

**Python.** The tests run on CPython 3.11 (``make test``, ``make test-floors``): no other
CPython can be installed on this machine (Debian 12's is 3.11; uv and pyenv fetch
interpreters from GitHub, which it cannot reach). Where other interpreters are installed
(pyenv), the library's sources are compiled by each, and every standard-library module they
import is looked up there (3.13, Colab's since August 2026, removed several).
"""

from __future__ import annotations

import ast
import glob
import json
import re
import subprocess
import sys

import pytest

from tools.book import ROOT, toc_chapters

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the pinned environment has it

DOCS = "https://docs.pytorch.org/docs"

#: Torch APIs newer than torch 2.0 (released March 2023), with the release that introduced
#: each: the ones the book uses (TORCH_USED says where each release is written down) and some
#: it may reach for next, so that a first use is caught. A call's keyword argument is written
#: ``function(keyword=)``. The releases of unused entries are indicative: confirm one in
#: PyTorch's documentation when the code starts to use it.
TORCH_NEW: dict[str, str] = {
    # used by the book (TORCH_USED)
    "torch.nn.functional.scaled_dot_product_attention(scale=)": "2.1",
    "torch.nn.attention.sdpa_kernel": "2.3",
    "torch.nn.attention.SDPBackend": "2.3",
    "torch.nn.attention.bias.causal_lower_right": "2.3",
    "torch.cuda.is_bf16_supported(including_emulation=)": "2.4",
    "torch.nn.attention.SDPBackend.CUDNN_ATTENTION": "2.5",
    "torch.nn.functional.scaled_dot_product_attention(enable_gqa=)": "2.5",
    # not used today
    "torch.nn.attention.bias.causal_upper_left": "2.3",
    "torch.nn.attention.bias.CausalBias": "2.3",
    "torch.nn.attention.bias.CausalVariant": "2.3",
    "torch.amp.GradScaler": "2.3",
    "torch.nn.RMSNorm": "2.4",
    "torch.nn.functional.rms_norm": "2.4",
    "torch.library.custom_op": "2.4",
    "torch.serialization.add_safe_globals": "2.4",
    "torch.nn.Buffer": "2.5",
    "torch.nn.attention.flex_attention": "2.5",
    "torch.nn.attention.flex_attention.flex_attention": "2.5",
    "torch.nn.attention.flex_attention.create_block_mask": "2.5",
    "torch.accelerator": "2.6",
    "torch.accelerator.is_available": "2.6",
    "torch.accelerator.current_accelerator": "2.6",
}

#: The table: every torch API newer than torch 2.0 that the library, the tools or the chapters
#: use, and where the release that introduced it (TORCH_NEW) is written down.
TORCH_USED: dict[str, str] = {
    "torch.nn.functional.scaled_dot_product_attention(scale=)": (
        f"{DOCS}/2.0/generated/torch.nn.functional.scaled_dot_product_attention.html: the 2.0 "
        "signature has no scale; torch 2.1 added it (keyword-only)"
    ),
    "torch.nn.attention.sdpa_kernel": (
        f"{DOCS}/2.3/nn.attention.html lists sdpa_kernel and SDPBackend (the page was created "
        "2024-01-24, after the 2.2 branch cut; torch <= 2.2 has no torch.nn.attention)"
    ),
    "torch.nn.attention.SDPBackend": f"{DOCS}/2.3/nn.attention.html",
    "torch.nn.attention.bias.causal_lower_right": (
        f"{DOCS}/2.3/nn.attention.bias.html lists causal_lower_right (torch.nn.attention "
        "itself is new in 2.3)"
    ),
    "torch.cuda.is_bf16_supported(including_emulation=)": (
        "the keyword is new in torch 2.4 (before it the function took no argument; code that "
        "supports both, e.g. unsloth's, tests for it by signature and says so)"
    ),
    "torch.nn.attention.SDPBackend.CUDNN_ATTENTION": (
        f"{DOCS}/2.5/_modules/torch/nn/attention.html switches the cuDNN backend: present in "
        "2.5, the first release where cuDNN attention is a default backend (on H100); an "
        "earlier first appearance, if any, is not confirmed, and 2.5 is the floor either way"
    ),
    "torch.nn.functional.scaled_dot_product_attention(enable_gqa=)": (
        "torch 2.5 added grouped-query attention to SDPA: "
        f"{DOCS}/2.5/generated/torch.nn.functional.scaled_dot_product_attention.html; code "
        "that supports older torch gates it on torch >= 2.5 (e.g. ncnn's pnnx tests)"
    ),
    "torch.nn.attention.flex_attention": (
        f"{DOCS}/2.5/nn.attention.flex_attention.html: FlexAttention (flex_attention with "
        "score_mod=, block_mask= and scale=, create_block_mask with BLOCK_SIZE= and device=, "
        "create_mask) is new in torch 2.5 (a prototype there; selfattn.flex imports it lazily)"
    ),
    "torch.nn.attention.flex_attention.flex_attention": (
        f"{DOCS}/2.5/nn.attention.flex_attention.html#torch.nn.attention.flex_attention."
        "flex_attention"
    ),
    "torch.nn.attention.flex_attention.create_block_mask": (
        f"{DOCS}/2.5/nn.attention.flex_attention.html#torch.nn.attention.flex_attention."
        "create_block_mask"
    ),
}

#: Namespaces torch 2.0 did not have: every symbol under one is new and must be covered by an
#: entry of TORCH_USED (itself or one of its parents, e.g. ``SDPBackend`` covers
#: ``SDPBackend.MATH``).
TORCH_NEW_NAMESPACES = ("torch.nn.attention", "torch.accelerator")

#: The APIs that set the floors of two other dependencies: (distribution, a regex that finds
#: the use in lib/) -> (the release that introduced it, where that is written down).
OTHER_USED: dict[tuple[str, str], tuple[str, str]] = {
    ("ipywidgets", r"\bwidgets\.Stack\("): (
        "8.0",
        "ipywidgets 8.0 changelog: the Stack container is new (the explorers select their "
        "precomputed views with it, so the website can show them)",
    ),
    ("pillow", r"\bImage\.Quantize\."): (
        "9.1",
        "https://pillow.readthedocs.io/en/stable/releasenotes/9.1.0.html: the enum classes "
        "(Image.Quantize among them) were added in 9.1.0",
    ),
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def declared_floors() -> dict[str, str]:
    """``{distribution: lower bound}`` from pyproject.toml's ``dependencies``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for dep in project["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9.]*)", dep.strip())
        assert m, f"pyproject.toml: {dep!r} is not of the form name>=version"
        floors[m[1].lower()] = m[2]
    return floors


# ------------------------------------------------------------------ what the code uses


def sources() -> list[tuple[str, str]]:
    """(name, Python source) of the library, the tools and every chapter's code cells."""
    found = []
    for folder in ("lib/selfattn", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            found.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    for path in toc_chapters():
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = [
            # IPython magics (the setup cell's %pip) are not Python: `pass` at their indent
            re.sub(r"^(\s*)[%!].*$", r"\1pass", "".join(c["source"]), flags=re.M)
            for c in cells
            if c["cell_type"] == "code"
        ]
        found.append((str(path.relative_to(ROOT)), "\n".join(code)))
    return found


def torch_uses(source: str) -> set[str]:
    """The torch symbols ``source`` names, as full dotted paths, and ``f(keyword=)`` for the
    keyword arguments of calls to torch functions."""
    tree = ast.parse(source)
    alias: dict[str, str] = {}
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    used.add(a.name)
                    if a.asname:
                        alias[a.asname] = a.name
                    else:
                        alias["torch"] = "torch"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "torch":
                for a in node.names:
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
                    used.add(f"{node.module}.{a.name}")

    def resolve(node) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in alias:
            return ".".join([alias[node.id], *reversed(parts)])
        return None

    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            name = resolve(node)
            if name:
                used.add(name)
        elif isinstance(node, ast.Call):
            name = resolve(node.func)
            if name:
                used.add(name)
                used |= {f"{name}({k.arg}=)" for k in node.keywords if k.arg}
    return used


@pytest.fixture(scope="module")
def uses() -> dict[str, set[str]]:
    """symbol -> the files that use it."""
    found: dict[str, set[str]] = {}
    for name, source in sources():
        for symbol in torch_uses(source):
            found.setdefault(symbol, set()).add(name)
    return found


def _parents(symbol: str) -> list[str]:
    """``a.b.c(k=)`` -> [``a.b.c(k=)``, ``a.b.c``, ``a.b``, ``a``]."""
    out = [symbol]
    base = symbol.split("(")[0]
    if base != symbol:
        out.append(base)
    while "." in base:
        base = base.rsplit(".", 1)[0]
        out.append(base)
    return out


def _is_new(symbol: str) -> bool:
    if symbol in TORCH_NEW:
        return True
    base = symbol.split("(")[0]
    return any(base == ns or base.startswith(ns + ".") for ns in TORCH_NEW_NAMESPACES)


def _covered(symbol: str) -> bool:
    if symbol in TORCH_USED:
        return True
    if symbol in TORCH_NEW or symbol.split("(")[0] in TORCH_NEW_NAMESPACES:
        return False  # a listed API or a whole namespace: only its own entry covers it
    return any(p in TORCH_USED for p in _parents(symbol)[1:] if p not in TORCH_NEW_NAMESPACES)


# ------------------------------------------------------------------------------ the tests


def test_the_scan_sees_the_book(uses):
    """The scanner reads aliases, from-imports and keywords (else the checks below pass
    vacuously)."""
    for symbol in (
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.scaled_dot_product_attention(is_causal=)",
        "torch.nn.Linear",
    ):
        assert symbol in uses, f"the scan no longer finds {symbol}"
    probe = torch_uses(
        "import torch.nn.functional as F\nfrom torch import nn\n"
        "from torch.nn.attention import SDPBackend as B\n"
        "y = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)\n"
        "n = nn.RMSNorm(4)\nb = B.MATH\n"
    )
    assert {
        "torch.nn.functional.scaled_dot_product_attention(enable_gqa=)",
        "torch.nn.RMSNorm",
        "torch.nn.attention.SDPBackend.MATH",
    } <= probe, probe


def test_every_new_torch_api_the_code_uses_is_in_the_table(uses):
    missing = sorted(s for s in uses if _is_new(s) and not _covered(s))
    assert not missing, (
        "torch APIs newer than 2.0 that TORCH_USED does not list (add each, with where the "
        "release that introduced it is written, and that release to TORCH_NEW; then set "
        "pyproject.toml's torch floor to the newest): "
        + ", ".join(f"{s} ({', '.join(sorted(uses[s]))})" for s in missing)
    )


def test_the_table_lists_only_what_the_code_uses(uses):
    stale = sorted(s for s in TORCH_USED if s not in uses)
    assert not stale, (
        f"TORCH_USED lists {stale}, which the code no longer uses: remove them (TORCH_NEW "
        "keeps their releases), and lower the torch floor if it was set by them"
    )


def test_the_table_takes_its_releases_from_the_catalogue():
    unknown = sorted(s for s in TORCH_USED if s not in TORCH_NEW)
    assert not unknown, f"TORCH_USED lists {unknown}: add each to TORCH_NEW with its release"


def test_torch_floor_is_the_newest_introduction():
    newest = max(TORCH_USED, key=lambda s: _version(TORCH_NEW.get(s, "0")))
    need = TORCH_NEW[newest]
    floor = declared_floors()["torch"]
    assert _version(floor) >= _version(need), (
        f"pyproject.toml declares torch>={floor}, but the code uses {newest}, new in torch {need}"
    )
    assert _version(floor) == _version(need), (
        f"pyproject.toml declares torch>={floor}; the newest API the code uses ({newest}) "
        f"needs only {need}: the floor keeps readers on older torch out for no reason"
    )


@pytest.mark.parametrize(("key", "entry"), list(OTHER_USED.items()), ids=lambda v: str(v))
def test_other_floors_cover_the_apis_that_set_them(key, entry):
    dist, pattern = key
    version, _ = entry
    used = [
        p.relative_to(ROOT)
        for p in (ROOT / "lib" / "selfattn").rglob("*.py")
        if re.search(pattern, p.read_text(encoding="utf-8"))
    ]
    assert used, f"no use of {pattern!r} in lib/ any more: revisit the {dist} floor"
    floor = declared_floors()[dist]
    assert _version(floor) >= _version(version), (
        f"pyproject.toml declares {dist}>={floor}, but {used[0]} uses an API new in {version}"
    )


def test_requires_python_and_classifiers_say_what_was_tested():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floor = re.fullmatch(r">=\s*(3\.\d+)", project["requires-python"])
    assert floor, f"requires-python is {project['requires-python']!r}, expected '>=3.X'"
    tested = {
        c.rsplit("::", 1)[1].strip()
        for c in project.get("classifiers", [])
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert here in tested or not tested, f"the tests run on {here}, not in the classifiers"
    assert all(_version(v) >= _version(floor[1]) for v in tested), (
        f"a classifier names a Python below requires-python {floor[1]}: {sorted(tested)}"
    )


def _interpreter(minor: str) -> str | None:
    found = sorted(glob.glob(f"/root/.pyenv/versions/{minor}.*/bin/python{minor}"))
    return found[-1] if found else None


#: The check run by another interpreter: compile every file, then look up every
#: standard-library module imported. Prints what fails; exit status 1 if anything does.
_CHECK = """
import ast, importlib.util, pathlib, sys
bad = []
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    text = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(compile(text, str(path), "exec", ast.PyCF_ONLY_AST))
        compile(text, str(path), "exec")
    except SyntaxError as e:
        bad.append(f"{path}: {e}")
        continue
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        for name in names:
            known = name in sys.stdlib_module_names if hasattr(sys, "stdlib_module_names") else 0
            if known and importlib.util.find_spec(name) is None:
                bad.append(f"{path}: imports {name}, absent")
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""


@pytest.mark.parametrize("minor", ["3.10", "3.12", "3.13"])
def test_library_compiles_on_other_pythons(minor):
    """Python 3.10 is requires-python's floor and 3.13 is Colab's (August 2026): where pyenv
    has them, the library compiles there and finds every standard-library module it imports.
    (Its tests need torch, which for these interpreters is a multi-GB download here.)"""
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no Python {minor} interpreter here (pyenv)")
    out = subprocess.run(
        [python, "-c", _CHECK, str(ROOT / "lib" / "selfattn")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, f"Python {minor}:\n{out.stdout}{out.stderr}"
