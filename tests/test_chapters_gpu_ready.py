"""Every chapter runs on a GPU through one pattern: ``device`` from ``selfattn.setup()``.

The chapters' code cells must not write ``.cuda()``, a ``"cuda"`` string (the device comes
from :func:`selfattn.runtime.get_device` via ``setup``), or hard-code ``torch.bfloat16`` as the
dtype to compute in (a T4 has no native bf16: :func:`selfattn.runtime.preferred_dtype` picks
it). Listing the three dtypes side by side to compare them is fine.
"""

from __future__ import annotations

import ast
import re

import nbformat
import pytest

from tools.book import toc_chapters

CUDA_CALL = re.compile(r"\.cuda\(")
CUDA_STRING = re.compile(r"""(["'])cuda(:\d+)?\1""")
BF16 = re.compile(r"torch\.bfloat16|\.bfloat16\(\)")
OTHER_DTYPES = re.compile(r"float16|float32|float64")  # float16 does not match bfloat16 alone

# Found when this test was written; the chapters' owners fix them, then this list shrinks.
# (Without cell numbers, which move when a chapter is edited.)
KNOWN: set[str] = set()


def _code(line: str) -> str:
    """The line without its comment (a ``#`` outside quotes is rare enough in the chapters)."""
    return line.split("#", 1)[0]


def violations(source: str) -> list[str]:
    found = []
    for line in source.splitlines():
        code = _code(line)
        if CUDA_CALL.search(code):
            found.append(f".cuda() call: {line.strip()}")
        if CUDA_STRING.search(code):
            found.append(f'"cuda" string: {line.strip()}')
        if BF16.search(code) and not OTHER_DTYPES.search(code.replace("bfloat16", "")):
            found.append(f"hard-coded bfloat16: {line.strip()}")
    return found


def test_the_scanner_finds_each_mistake():
    assert violations("model = model.cuda()") == [".cuda() call: model = model.cuda()"]
    assert violations('x = x.to("cuda")')[0].startswith('"cuda" string')
    assert violations("d = torch.device('cuda:0')")[0].startswith('"cuda" string')
    assert violations("q = q.to(device, torch.bfloat16)")[0].startswith("hard-coded bfloat16")
    assert violations("h = h.bfloat16()")[0].startswith("hard-coded bfloat16")
    # fine: the device from setup, the helper's dtype, comparisons of dtypes, comments
    assert not violations("device = selfattn.setup(seed=0)\nm = m.to(device)")
    assert not violations("if torch.cuda.is_available():")
    assert not violations("dtype = preferred_dtype(device)")
    assert not violations("for dtype in (torch.float32, torch.float16, torch.bfloat16):")
    assert not violations("x = 1  # .cuda() would be wrong here")


def test_chapters_use_the_runtime_device_and_dtype():
    found, new = [], []
    for path in toc_chapters():
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                for v in violations(cell.source):
                    found.append(f"{path.name}: cell {i}: {v}")
                    if f"{path.name}: {v}" not in KNOWN:
                        new.append(found[-1])
    assert not new, "chapters that bypass selfattn.runtime:\n" + "\n".join(new)
    if found:
        pytest.xfail("known, for the chapters' owners to fix:\n" + "\n".join(found))


# --- Trained models go to ``device`` ----------------------------------------------------------
#
# The rule, checked on the chapter's code cells read as one program in order: a name bound to a
# class instantiation (``name = CapWords(...)``, possibly followed by method calls such as
# ``.eval()``; an ALL-CAPS callee is not taken for a class) that the chapter later trains must
# be moved to ``device``, either in that statement (``name = Model(...).to(device)``) or by a
# later ``name.to(device)`` / ``name = name.to(device)`` no later than its first training.
# "Trains" means a later statement that passes the name to ``train_loop(name, ...)``, calls
# ``name.train(...)``, hands it (usually ``name.parameters()``) to an optimiser (a call whose
# name is one of torch.optim's), or contains both the name and a ``.backward()`` call. Names
# are matched across the whole chapter, so reusing one name for a trained model and an
# untrained layer can only make the check stricter. Models that a library helper creates
# (``extrapolation_run``, ``attention_stack``) are out of its reach: those helpers take, or
# lack, a device argument of their own.

OPTIMISERS = {
    "SGD",
    "Adam",
    "AdamW",
    "Adamax",
    "Adagrad",
    "Adadelta",
    "RMSprop",
    "NAdam",
    "RAdam",
    "LBFGS",
    "SparseAdam",
}

# (chapter file name, model name) pairs that may stay off ``device``, each with its reason.
TRAINED_OFF_DEVICE: dict[tuple[str, str], str] = {}


def _python(cell_source: str) -> str:
    """The cell as plain Python: IPython line magics and shell escapes become ``pass``."""
    if cell_source.lstrip().startswith("%%"):
        return ""
    lines = []
    for line in cell_source.splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        lines.append(indent + "pass" if stripped[:1] in ("%", "!") else line)
    return "\n".join(lines)


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_to_device(call: ast.Call) -> bool:
    """``<anything>.to(..., device, ...)`` or ``.to(device=device)``."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "to"):
        return False
    args = [*call.args, *(k.value for k in call.keywords)]
    return any(isinstance(a, ast.Name) and a.id == "device" for a in args)


def _instantiation(value: ast.expr) -> tuple[str, bool] | None:
    """For ``CapWords(...)`` with method calls chained after it: (class, has ``.to(device)``)."""
    to_device = False
    node = value
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        to_device |= _is_to_device(node)
        inner = node.func.value
        if not isinstance(inner, ast.Call):
            break
        node = inner
    if not isinstance(node, ast.Call):
        return None
    name = _call_name(node.func)
    if name and name[0].isupper() and not name.isupper():
        return name, to_device
    return None


def _statements(tree: ast.AST):
    """Every simple statement (no compound ones), at any depth, in source order."""
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body"):
            yield node


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _trained_names(stmt: ast.stmt) -> set[str]:
    """The names this statement trains (see the rule above)."""
    trained: set[str] = set()
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]
    for call in calls:
        name = _call_name(call.func)
        if name == "train_loop" and call.args and isinstance(call.args[0], ast.Name):
            trained.add(call.args[0].id)
        elif (
            name == "train"
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
        ):
            trained.add(call.func.value.id)
        elif name in OPTIMISERS:
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                trained |= _names(arg)
        elif name == "backward":
            trained |= _names(stmt)
    return trained


def untrained_device_violations(cell_sources: list[str]) -> list[str]:
    """Models a chapter trains without moving them to ``device`` (see the rule above).

    ``cell_sources`` are the chapter's code cells in order (the messages count code cells
    only, from 0); returns one line per model.
    """
    events = []  # (position, kind, name, detail) in program order
    for i, source in enumerate(cell_sources):
        tree = ast.parse(_python(source))
        for stmt in _statements(tree):
            pos = (i, stmt.lineno, stmt.col_offset)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                made = _instantiation(stmt.value)
                if isinstance(target, ast.Name) and made:
                    events.append((pos, "new", target.id, made))
            for call in ast.walk(stmt):
                if (
                    isinstance(call, ast.Call)
                    and _is_to_device(call)
                    and isinstance(call.func.value, ast.Name)
                ):
                    events.append((pos, "moved", call.func.value.id, None))
            for name in _trained_names(stmt):
                events.append((pos, "trained", name, None))
    events.sort(key=lambda e: e[0])
    found = []
    for pos, kind, name, made in events:
        if kind != "new" or made[1]:
            continue
        later = [(p, k) for p, k, n, _ in events if n == name and p > pos]
        trained_at = next((p for p, k in later if k == "trained"), None)
        if trained_at is None:
            continue
        # moved before (or in the statement of) the first training, not after it
        moved = any(k == "moved" and p <= trained_at for p, k in later)
        if not moved:
            found.append(
                f"code cell {pos[0]}: {name} = {made[0]}(...) is trained "
                f"(code cell {trained_at[0]}) without .to(device) before"
            )
    return found


FAKE_CHAPTER = [
    "device = selfattn.setup(seed=0)\n%matplotlib inline",
    # trained by train_loop, never moved: a violation
    "model = TinyModel(4).eval()\nlosses = train_loop(model, batches, loss_fn, steps=3)",
    # moved in the statement, moved later, or never trained: fine
    "good = TinyModel(4).to(device)\ntrain_loop(good, batches, loss_fn, steps=3)",
    "late = TinyModel(4)\nlate = late.to(device)\nopt = torch.optim.Adam(late.parameters())",
    "probe = TinyModel(4)\nwith torch.no_grad():\n    probe(x)",
    # trained through .backward() and through an optimiser: two more violations
    "table = Embedding(8, 4)\ntable(\n    x\n).sum().backward()",
    "net = Net()\nopt = SGD(net.parameters(), lr=0.1)",
]


def test_the_device_checker_finds_each_untrained_model():
    found = untrained_device_violations(FAKE_CHAPTER)
    assert [line.split(" = ")[0] for line in found] == [
        "code cell 1: model",
        "code cell 5: table",
        "code cell 6: net",
    ], found
    assert "TinyModel" in found[0] and "cell 1)" in found[0]
    # moving it after the training does not count
    assert untrained_device_violations(["m = Mod()\ntrain_loop(m, b, f, steps=1)\nm.to(device)"])
    assert not untrained_device_violations(
        ["m = Mod()\nm.to(device)\ntrain_loop(m, b, f, steps=1)"]
    )
    # a method call named train on the model counts as training
    assert untrained_device_violations(["m = Mod()\nm.train()"])
    assert not untrained_device_violations(["m = Mod().to(device=device)\nm.train()"])
    # ALL-CAPS calls are constants' factories, not classes: not checked
    assert not untrained_device_violations(["m = M()\nm.train()"])


def test_chapters_move_the_models_they_train_to_device():
    found = []
    for path in toc_chapters():
        nb = nbformat.read(path, as_version=4)
        sources = [c.source for c in nb.cells if c.cell_type == "code"]
        for v in untrained_device_violations(sources):
            name = v.split(": ", 1)[1].split(" = ")[0]
            if (path.name, name) not in TRAINED_OFF_DEVICE:
                found.append(f"{path.name}: {v}")
    assert not found, "models trained off `device`:\n" + "\n".join(found)
