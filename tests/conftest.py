import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
# One torch thread per test process: pytest-xdist already runs one process per core, and
# threads fighting over two cores make the small training tests several times slower.
torch.set_num_threads(1)
sys.path.insert(0, str(ROOT / "tools"))
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
