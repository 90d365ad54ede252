import os

# Triton reads TRITON_INTERPRET when it is first imported: a test module that imports Triton
# before another sets the variable would leave the interpreter's kernels unable to run in
# that worker. So the whole session interprets (there is no GPU in the tests); the one test
# that compiles for real GPU targets does it in a fresh process without the variable.
os.environ["TRITON_INTERPRET"] = "1"
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
# One torch thread per test process: pytest-xdist already runs one process per core, and
# threads fighting over two cores make the small training tests several times slower.
torch.set_num_threads(1)
os.environ.setdefault("SELFATTN_PROGRESS", "0")
os.environ.setdefault("MPLBACKEND", "Agg")

from hypothesis import settings  # noqa: E402

# Property tests must be quick and reproducible in CI.
settings.register_profile("book", max_examples=60, deadline=None, derandomize=True)
settings.load_profile("book")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _fresh_recorder_memory(monkeypatch):
    """Each test starts with an empty in-memory record (a reader's kernel keeps its figures
    there, see selfattn.results), so no figure recorded by one test leaks into another."""
    from selfattn import results

    monkeypatch.setattr(results, "_SESSION", {})
    monkeypatch.setattr(results, "_FAILED", [])
