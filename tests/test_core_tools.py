"""setup(), record(), train_loop(), plot_attention() and the checker machinery."""

import json
import random

import matplotlib
import numpy as np
import pytest
import selfattn
import torch
from selfattn.exercises import Mismatch, call_answer, checker, expect_close

from tools import book  # noqa: E402


def test_setup_seeds_everything_and_returns_device():
    dev = selfattn.setup(seed=3)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    selfattn.setup(seed=3)
    assert a == (random.random(), np.random.rand(), torch.rand(1).item())
    assert dev.type in {"cpu", "cuda"} and torch.get_num_threads() == 1


def test_record_writes_results(tmp_path):
    selfattn.record("ch99", "ch99_answer", np.float64(0.5), results_dir=tmp_path)
    selfattn.record("ch99", "ch99_name", "x", results_dir=tmp_path)
    assert json.loads((tmp_path / "ch99.json").read_text()) == {
        "ch99_answer": 0.5,
        "ch99_name": "x",
    }
    loaded = selfattn.load_results(tmp_path)
    assert loaded["ch99"] == {"ch99_answer": 0.5, "ch99_name": "x"}
    # The packaged results (selfattn.recorded) come along; the local folder wins on a clash.
    assert "bench_cpu" in loaded and "ch03" in loaded
    (tmp_path / "ch03.json").write_text('{"mine": 1}')
    assert selfattn.load_recorded("ch03", results_dir=tmp_path) == {"mine": 1}
    assert selfattn.load_results(tmp_path)["ch03"] == {"mine": 1}


def test_load_recorded_finds_packaged_results_and_names_missing_ones(tmp_path):
    bench = selfattn.load_recorded("bench_cpu", results_dir=tmp_path / "absent")
    assert "cases" in bench
    with pytest.raises(FileNotFoundError, match="no recorded results 'nope'"):
        selfattn.load_recorded("nope", results_dir=tmp_path)
    assert selfattn.load_recorded("nope", results_dir=tmp_path, default={}) == {}


def test_claim_passes_silently_and_quotes_the_sentence_it_protects(monkeypatch):
    monkeypatch.setenv("SELFATTN_RECORD", "1")  # recording the book: a failed claim raises
    selfattn.claim(True, "true things pass")
    selfattn.claim(np.bool_(True), "numpy booleans too")
    selfattn.claim(torch.tensor(True), "and torch booleans")
    with pytest.raises(selfattn.ClaimError, match="fused is faster at every size"):
        selfattn.claim(np.array([1.0, 2.0]).min() > 1.5, "fused is faster at every size")
    with pytest.raises(TypeError, match="non-empty str"):
        selfattn.claim(True, "")


def test_train_loop_reduces_loss():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    losses = selfattn.train_loop(
        model,
        lambda step: (x, y),
        lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(),
        steps=200,
        lr=0.05,
        progress=False,
    )
    assert len(losses) == 200 and losses[-1] < 0.01 * losses[0]
    with pytest.raises(ValueError, match="steps must be >= 1"):
        selfattn.train_loop(model, [], lambda m, b: b, steps=0)


def test_plot_attention_labels_and_errors():
    matplotlib.use("Agg")
    ax = selfattn.plot_attention(
        torch.softmax(torch.randn(1, 3, 4), -1), x_labels=list("abcd"), title="T"
    )
    assert ax.get_title() == "T" and ax.get_xlabel() == "key"
    with pytest.raises(ValueError, match="x_labels has 2 entries, expected 4"):
        selfattn.plot_attention(torch.rand(3, 4), x_labels=["a", "b"])


@checker("0.1", "double it")
def check_double(answer):
    for x in (torch.tensor([1.0, -2.0]), torch.zeros(0)):
        expect_close(call_answer(answer, x), 2 * x, case=f"x={x.tolist()}")


def test_checker_reports_pass_fail_stub_and_crash(capsys):
    assert check_double(lambda x: 2 * x).status == "passed"
    assert check_double(lambda x: 3 * x).status == "failed"
    assert check_double(None).status == "not attempted"

    def stub(x):
        raise NotImplementedError

    assert check_double(stub).status == "not attempted"
    assert check_double(lambda x: x.reshape(7)).status == "failed"  # crash is reported, not raised
    lines = capsys.readouterr().out.strip().splitlines()
    assert (
        lines[0].startswith("✅")
        and "largest difference" in lines[1]
        and "not attempted" in lines[2]
    )
    assert "raised RuntimeError" in lines[4]


def test_mismatch_is_an_assertion():
    assert issubclass(Mismatch, AssertionError)


def test_expect_close_names_a_known_mistake_and_not_the_right_answer():
    import numpy as np
    import pytest
    from selfattn.exercises import Mismatch, expect_close

    right = np.array([[0.25, 0.75], [0.5, 0.5]])
    wrong = right.T.copy()
    mistakes = {"your weights sum to 1 over the queries, not the keys": wrong}
    with pytest.raises(Mismatch, match="over the queries, not the keys"):
        expect_close(wrong, right, case="c", mistakes=mistakes)
    expect_close(right, right, case="c", mistakes=mistakes)  # the right answer passes
    with pytest.raises(Mismatch, match="largest difference"):  # an unknown mistake
        expect_close(right + 1, right, case="c", mistakes=mistakes)


def test_chapter_titles_are_the_table_of_contents(tmp_path):
    # The registry a chapter run alone reads (chapter 10 on Colab): the package's copy is the
    # table of contents of this checkout (test_notebooks checks that chapter NN records as
    # "chNN", the registry's key).
    titles = selfattn.chapter_titles(results_dir=tmp_path)  # nothing local: the package's
    assert titles == book.chapter_titles()
    assert list(titles) == [f"ch{i:02d}" for i in range(1, len(titles) + 1)]
    (tmp_path / "toc.json").write_text(json.dumps({"ch01": "mine"}))
    assert selfattn.chapter_titles(results_dir=tmp_path) == {"ch01": "mine"}
