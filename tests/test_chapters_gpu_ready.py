"""Every chapter runs on a GPU through one pattern: ``device`` from ``selfattn.setup()``.

The chapters' code cells must not write ``.cuda()``, a ``"cuda"`` string (the device comes
from :func:`selfattn.runtime.get_device` via ``setup``), or hard-code ``torch.bfloat16`` as the
dtype to compute in (a T4 has no native bf16: :func:`selfattn.runtime.preferred_dtype` picks
it). Listing the three dtypes side by side to compare them is fine.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from book import toc_chapters

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
