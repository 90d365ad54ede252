"""A reader's run writes nothing and never stops on a claim; recording the book does both.

One switch, ``SELFATTN_RECORD`` (set by ``make execute``, ``make bench``, ``make test`` and
``make gpu-check``), decides both whether :func:`selfattn.claim` raises and whether
:func:`selfattn.record` writes ``results/<chapter>.json``.
"""

import hashlib
import json
import os
import subprocess

import nbformat
import pytest
import selfattn
from nbclient import NotebookClient
from selfattn import results

from tools.book import ROOT, chapter


@pytest.fixture
def reader(monkeypatch, tmp_path):
    """A reader's kernel: not recording, no folder of their own, in an empty folder."""
    monkeypatch.delenv("SELFATTN_RECORD", raising=False)
    monkeypatch.delenv("SELFATTN_RECORD_TO", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(results, "_SESSION", {})
    monkeypatch.setattr(results, "_FAILED", [])
    return tmp_path


def test_a_failed_claim_prints_a_note_in_a_readers_run(reader, capsys):
    assert not selfattn.recording()
    selfattn.claim(1 > 2, "one is more than two", measured="1 vs 2")
    out = capsys.readouterr().out
    assert "does not support the sentence 'one is more than two'" in out
    assert "This run measured: 1 vs 2." in out
    assert "the run goes on" in out
    assert selfattn.claim_note("one is more than two", "1 vs 2") in out
    assert selfattn.failed_claims() == ["one is more than two"]
    selfattn.claim(True, "true things pass silently")
    assert capsys.readouterr().out == ""


def test_a_failed_claim_raises_while_recording(reader, monkeypatch):
    monkeypatch.setenv("SELFATTN_RECORD", "1")
    assert selfattn.recording()
    with pytest.raises(selfattn.ClaimError, match=r"'one is more than two' \(this run: 1 vs 2\)"):
        selfattn.claim(1 > 2, "one is more than two", measured="1 vs 2")


def test_a_readers_record_stays_in_memory(reader):
    rec = selfattn.recorder("ch99")
    rec("answer", 42)
    assert not (reader / "results").exists()
    assert list(reader.iterdir()) == []
    # later cells of the same kernel read it back, over the recorded file
    assert selfattn.load_recorded("ch99") == {"ch99_answer": 42}
    merged = selfattn.load_results()["ch03"]
    assert merged == selfattn.load_recorded("ch03")


def test_a_reader_who_asks_keeps_their_run(reader, monkeypatch, tmp_path_factory):
    mine = tmp_path_factory.mktemp("mine")
    monkeypatch.setenv("SELFATTN_RECORD_TO", str(mine))
    selfattn.recorder("ch99")("answer", 42)
    assert json.loads((mine / "ch99.json").read_text()) == {"ch99_answer": 42}
    assert not (reader / "results").exists()
    results._SESSION.clear()  # a new kernel (chapter 10) reads the reader's folder
    assert selfattn.load_recorded("ch99") == {"ch99_answer": 42}


def test_recording_writes_results_next_to_the_notebook(reader, monkeypatch):
    monkeypatch.setenv("SELFATTN_RECORD", "1")
    selfattn.recorder("ch99")("answer", 42)
    assert json.loads((reader / "results" / "ch99.json").read_text()) == {"ch99_answer": 42}


# ------------------------------------------------------------------ whole chapters, run in place

SUMMARY = chapter(10)  # the quickest chapter that records figures


def _run(nb, folder, env):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def _reader_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SELFATTN_RECORD")}
    return env | {"SELFATTN_PROGRESS": "0"} | extra


def _tracked_state():
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    digests = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((ROOT / "chapters" / "results").glob("*.json"))
    }
    return status, digests


def test_a_chapter_run_in_place_by_a_reader_leaves_the_repository_untouched():
    before = _tracked_state()
    _run(nbformat.read(SUMMARY, as_version=4), SUMMARY.parent, _reader_env())
    assert _tracked_state() == before


def test_a_chapter_run_while_recording_writes_its_results(tmp_path):
    copy = tmp_path / SUMMARY.name
    copy.write_bytes(SUMMARY.read_bytes())
    _run(nbformat.read(copy, as_version=4), tmp_path, _reader_env(SELFATTN_RECORD="1"))
    written = json.loads((tmp_path / "results" / "ch10.json").read_text())
    assert written == json.loads((ROOT / "chapters" / "results" / "ch10.json").read_text())


def test_a_claim_that_fails_in_a_readers_run_shows_the_note_and_the_chapter_runs_on(tmp_path):
    nb = nbformat.read(SUMMARY, as_version=4)
    forced = nbformat.v4.new_code_cell(
        'selfattn.claim(False, "this sentence is forced to fail", measured="nothing")'
    )
    nb.cells.insert(2, forced)  # right after the setup cell
    _run(nb, tmp_path, _reader_env())
    text = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "does not support the sentence 'this sentence is forced to fail'" in text
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell after the failed claim did not run"
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    assert not (tmp_path / "results").exists()


# ------------------------------------------------ everything live (SELFATTN_LIVE)


def test_every_study_a_chapter_reads_has_a_script_that_recomputes_it():
    import re

    read = set()
    for path in (ROOT / "chapters").glob("*.ipynb"):
        read |= set(re.findall(r'load_recorded\(\\"(\w+)\\"', path.read_text()))
    # benchmarks (bench_*, and the chapters' ch11_bench, ch12_bench) are written by `make bench`
    bench = {"ch11_bench", "ch12_bench"}
    studies = {name for name in read if not name.startswith("bench_") and name not in bench}
    assert studies and studies <= set(results.STUDIES), studies - set(results.STUDIES)
    for module, _ in results.STUDIES.values():
        script = ROOT / (module.replace(".", "/") + ".py")
        assert module.startswith("tools.") and script.is_file(), module
        assert "--out" in script.read_text() or "_precompute" in script.read_text()


def test_everything_live_recomputes_a_study_once_per_kernel(reader, monkeypatch, tmp_path_factory):
    clone = tmp_path_factory.mktemp("clone")
    tools = clone / "tools"
    tools.mkdir()
    (tools / "__init__.py").write_text("")
    (tools / "fake.py").write_text(
        "import json, os, sys\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "json.dump({'runs': 1, 'path': os.environ.get('MKL_CBWR')}, open(out, 'w'))\n"
    )
    monkeypatch.setattr(results, "STUDIES", {"ch99_study": ("tools.fake", {"MKL_CBWR": "X"})})
    monkeypatch.setattr(results, "_clone", lambda: clone)
    assert selfattn.load_recorded("ch99_study", default={"recorded": True}) == {
        "recorded": True
    }  # the switch is off: the recorded results
    monkeypatch.setenv("SELFATTN_LIVE", "1")
    assert selfattn.load_recorded("ch99_study") == {"runs": 1, "path": "X"}
    (tools / "fake.py").write_text("raise SystemExit('run twice')\n")
    assert selfattn.load_recorded("ch99_study") == {"runs": 1, "path": "X"}  # kept


def test_everything_live_without_a_clone_says_so_and_reads_the_recorded(
    reader, monkeypatch, capsys
):
    monkeypatch.setattr(results, "_clone", lambda: None)
    monkeypatch.setenv("SELFATTN_LIVE", "1")
    recorded = selfattn.load_recorded("ch03_scale_study")
    assert "needs a clone of the book's repository" in capsys.readouterr().out
    monkeypatch.delenv("SELFATTN_LIVE")
    assert recorded == selfattn.load_recorded("ch03_scale_study")
