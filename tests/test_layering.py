"""The library's import layering (docs/design.md, "Layering"): no module imports one above it,
and the modules import each other without cycles.

Every module of ``selfattn`` has a layer, given by the longest matching prefix in ``LAYERS``:

0. tools every layer uses: argument validators, the recorder, the runtime, plotting;
1. the core: attention, masks, multi-head attention, positions;
2. kernels and today's layers, on the core: ``efficient/``, ``flex``, latent attention, ...;
3. models and the data they train on;
4. on top: the transformers bridge, ``distributed``, ``bench``, widgets and exercises.

An import counts wherever it is written: a lazy import inside a function is still a
dependency (it only hides a cycle from the interpreter). A new module must be given its layer
here, deliberately; the test names any module that has none.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parent.parent / "lib"

#: Layer of each module, by the longest matching dotted prefix (a package's prefix covers its
#: submodules unless a longer one is listed).
LAYERS = {
    # 0: tools of every layer
    "selfattn._checks": 0,
    "selfattn.results": 0,
    "selfattn.runtime": 0,
    "selfattn.train": 0,
    "selfattn.viz": 0,
    "selfattn.diagrams": 0,
    "selfattn.costs": 0,
    "selfattn.cache_sizes": 0,
    "selfattn.reference": 0,
    "selfattn.quizzes": 0,
    "selfattn.data.vocab": 0,
    "selfattn.data._examples": 0,
    "selfattn.exercises._core": 0,
    "selfattn.i18n": 0,
    "selfattn.widgets._explorer": 0,
    # 1: the core
    "selfattn.masks": 1,
    "selfattn.attention": 1,
    "selfattn.multihead": 1,
    "selfattn.positional": 1,
    # 2: kernels and today's layers, on the core
    "selfattn.efficient": 2,
    "selfattn.flex": 2,
    "selfattn.latent": 2,
    "selfattn.differential": 2,
    "selfattn.delta_net": 2,
    "selfattn.learned_sparse": 2,
    "selfattn.norms": 1,
    "selfattn.gradient_reach": 2,
    # 3: models and their data
    "selfattn.models": 3,
    "selfattn.data": 3,
    "selfattn.packing": 3,
    # 4: on top
    "selfattn.hf": 4,
    "selfattn.distributed": 4,
    "selfattn.bench": 4,
    "selfattn.bench_flex": 4,
    "selfattn.bench_sparse": 4,
    "selfattn.widgets": 4,
    "selfattn.exercises": 4,
    # the package itself re-exports every layer
    "selfattn": 5,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (LIB / "selfattn").rglob("*.py"):
        parts = list(path.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def layer(module: str) -> int | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS and (end == len(parts) or prefix != "selfattn"):
            return LAYERS[prefix]
    return None


def imports(module: str) -> set[str]:
    """The library modules ``module`` imports, at the top or inside a function."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "selfattn":
                base = node.module
            else:
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
    found = {m for m in found if m in MODULES and m != module}
    # Importing a.b.c runs the package a.b's __init__ first: a dependency on that package too
    # (how a lazy import of one kernel can still close a cycle through its package).
    for target in list(found):
        parent = target.rpartition(".")[0]
        while parent.count(".") >= 1 and not (module + ".").startswith(parent + "."):
            found.add(parent)
            parent = parent.rpartition(".")[0]
    return found


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if layer(m) is None)
    assert not missing, f"give these modules a layer in tests/test_layering.py: {missing}"


def test_no_module_imports_upward():
    upward = [
        f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
        for m in sorted(MODULES)
        for t in sorted(imports(m))
        if layer(m) is not None and layer(t) is not None and layer(t) > layer(m)
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def _cycle() -> list[str] | None:
    """One import cycle among the library's modules (package re-exports aside), or None."""
    # A submodule never depends on its own package's __init__ (that would be the re-export
    # turned round); the package's __init__ depends on the submodules it imports.
    graph = {m: {t for t in imports(m) if not m.startswith(t + ".")} for m in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return stack[stack.index(t) :] + [t]
            if t not in state and (found := visit(t)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle():
    cycle = _cycle()
    assert cycle is None, "an import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    "module, expected", [("selfattn.efficient.flash", 2), ("selfattn.masks", 1)]
)
def test_layer_lookup(module, expected):
    assert layer(module) == expected
