"""The book's tools: scripts run from the repository root as ``python -m tools.NAME``.

Each script imports its siblings as ``from tools import book`` or ``from tools.book import ROOT``
(no ``sys.path`` edits anywhere); tests import them the same way (pytest's ``pythonpath``, in
pyproject.toml, puts the root on the path). ``python tools/NAME.py`` still works: a script
that imports a sibling starts with :func:`tools._script.run_as_module`'s guard, which runs it
again as ``python -m tools.NAME`` (see there).
"""

import os

# `python tools/NAME.py` re-ran as `python -m tools.NAME` with the repository root added to
# PYTHONPATH (tools/_script.py). This process has the root on sys.path now; give what it starts
# (kernels, venvs, pip, pytest) the caller's environment back.
_CALLER_PYTHONPATH = os.environ.pop("SELFATTN_TOOLS_CALLER_PYTHONPATH", None)
if _CALLER_PYTHONPATH is not None:
    if _CALLER_PYTHONPATH:
        os.environ["PYTHONPATH"] = _CALLER_PYTHONPATH
    else:
        os.environ.pop("PYTHONPATH", None)
