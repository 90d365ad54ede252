"""The second pass of ``make test`` starts from Colab's own versions (issue 37).

``tools/colab_constraints.txt`` mirrors Colab's runtime list for the packages the book touches
(tools/colab_versions.py writes it from a copy of googlecolab/backend-info's freeze), and
``tools/reader_run.py`` runs its second pass in a venv of exactly those versions, into which
the wheel is installed as the setup cell installs it. These tests check the file, the tool
that writes it, and that a chapter's outputs do not depend on myst-nb, which Colab lacks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import colab_versions, reader_run

ROOT = Path(__file__).resolve().parent.parent

FREEZE = """\
absl-py==1.4.0
torch==2.11.0+cu128
triton==3.6.0
numpy==2.1.3
matplotlib==3.10.0
matplotlib-inline==0.2.2
pillow==11.3.0
tqdm==4.67.3
ipywidgets==7.7.1
widgetsnbextension==3.6.10
jupyterlab_widgets==3.0.16
ipykernel==6.17.1
ipython==7.34.0
jupyter_client==7.4.9
jupyter_core==5.9.1
traitlets==5.7.1
pyzmq==26.2.1
tornado==6.5.7
nest-asyncio==1.6.0
nbformat==5.11.1
notebook==6.5.7
pytest==8.4.2
"""


def test_the_tool_keeps_the_books_packages_and_drops_local_tags():
    text = colab_versions.constraints(
        colab_versions.parse_freeze(FREEZE), "a test copy", "3.13.15"
    )
    pins = colab_versions.parse_freeze(text)
    assert set(pins) == set(colab_versions.PACKAGES)
    assert pins["torch"] == "2.11.0"  # +cu128 names PyTorch's own index
    assert "# Colab: torch==2.11.0+cu128" in text
    assert pins["ipywidgets"] == "7.7.1" and pins["jupyterlab-widgets"] == "3.0.16"
    assert "absl-py" not in pins
    assert "# Source: a test copy" in text
    assert "# Colab's Python: 3.13.15" in text


def test_the_tool_refuses_a_list_that_lacks_a_package():
    with pytest.raises(SystemExit, match="ipywidgets"):
        colab_versions.constraints(
            colab_versions.parse_freeze(FREEZE.replace("ipywidgets==7.7.1\n", "")), "x", "3.13.15"
        )


def test_the_committed_file_names_its_source_and_every_package():
    text = (ROOT / "tools" / "colab_constraints.txt").read_text()
    assert "# Source: googlecolab/backend-info" in text
    assert "# Written: " in text
    assert colab_versions.colab_python().startswith("3.")
    assert set(colab_versions.read_constraints()) == set(colab_versions.PACKAGES)


def test_the_second_pass_runs_on_colabs_versions():
    assert reader_run.ENVS == {"native": "book", "second": "colab"}
    assert set(reader_run.ENVS) == set(reader_run.PATHS)


def _published(glue, monkeypatch, target):
    shown = []
    monkeypatch.setattr(target, lambda obj, **kw: shown.append((obj, kw)))
    glue("ch99_x", 0.25, display=False)
    glue("ch99_y", "below 1e-06", display=True)
    return shown


def test_glue_without_myst_nb_publishes_what_myst_nb_publishes(monkeypatch):
    """On Colab (no myst-nb) a chapter publishes the same glue displays as where it is."""
    pytest.importorskip("myst_nb")
    from myst_nb.ext import glue as myst_glue
    from selfattn import results

    theirs = _published(myst_glue.glue, monkeypatch, "myst_nb.ext.glue.ipy_display")
    ours = _published(results._glue_without_myst_nb, monkeypatch, "IPython.display.display")
    assert ours == theirs
    assert results.GLUE_PREFIX == myst_glue.GLUE_PREFIX


def test_building_the_colab_venv_afresh_checks_colab_versions(tmp_path, monkeypatch):
    """The fresh build (no venv kept from an earlier run, as on a new CI machine) installs
    Colab's pins plus the book's test tools and checks what pip installed against Colab's
    pins; pip and python themselves are stubbed out here."""
    pins = {"torch": "2.11.0", "ipywidgets": "7.7.1"}
    commands = []

    def run(cmd, **kw):
        commands.append(cmd)
        if [str(c) for c in cmd[1:3]] == ["-m", "venv"]:
            Path(cmd[-1]).mkdir(parents=True)

    monkeypatch.setattr(reader_run, "run", run)
    monkeypatch.setattr(reader_run, "_versions", lambda python, names: {n: pins[n] for n in names})
    venv = tmp_path / "colab-venv"
    reader_run._install_colab_base(venv, pins, "key", Path(sys.executable))
    assert (venv / ".constraints").read_text() == "key"
    install = [str(c) for c in commands[-1]]
    assert any(c.startswith("nbval==") for c in install), install
    monkeypatch.setattr(reader_run, "_versions", lambda python, names: dict.fromkeys(names, "0"))
    with pytest.raises(SystemExit, match="did not install Colab's versions"):
        reader_run._install_colab_base(venv, pins, "key", Path(sys.executable))
