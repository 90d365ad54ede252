"""The second floating-point path of ``make test`` (tools/reader_run.py) is another machine.

Strict nbval runs every chapter twice: on this CPU's own path and on :data:`SECOND_PATH`
(ATen's scalar kernels, MKL's compatible code path). That pass stands for a reader's machine
only if it really rounds differently: here a short training run of the book's chapter-1 model
ends at a different loss on the two paths, as it does on another CPU.
"""

import json
import os
import subprocess
import sys

from tools.reader_run import SECOND_PATH

TRAIN = """
import json, torch, torch.nn.functional as F
import selfattn
from selfattn import train_loop
from selfattn.data import LongRangeTask
from selfattn.models import AttentionClassifier
selfattn.setup(seed=0)
task = LongRangeTask()
model = AttentionClassifier(len(task.vocab), task.num_classes, d_model=32, num_layers=1)
loss = lambda m, b: F.cross_entropy(m(b[0]), b[1])
losses = train_loop(model, task.sampler((1, 100), 32, seed=1), loss, steps=60, lr=3e-3)
print(json.dumps([float(x) for x in losses]))
"""


def _losses(extra: dict) -> list[float]:
    env = {k: v for k, v in os.environ.items() if k not in SECOND_PATH} | extra
    env["SELFATTN_PROGRESS"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", TRAIN], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_second_path_changes_a_training_run_but_not_its_course():
    native, second = _losses({}), _losses(SECOND_PATH)
    assert len(native) == len(second) == 60
    assert native != second, "the second path rounds exactly like this CPU: it tests nothing"
    # the same run, rounded differently: early losses agree closely, and it still learns
    assert abs(native[0] - second[0]) < 1e-4
    assert second[-1] < second[0]
