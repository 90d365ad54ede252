"""Lets ``python tools/NAME.py`` run as ``python -m tools.NAME``, without editing ``sys.path``.

Run as a file, a script has ``tools/`` (not the repository root) on its path, so its
``from tools import ...`` lines cannot work. A script that imports a sibling therefore opens
with this guard, before those imports::

    if __name__ == "__main__" and not __package__:  # python tools/NAME.py
        import _script  # tools/ is on the path of a script run as a file

        _script.run_as_module(__file__)

which replaces the process with ``python -P -m tools.NAME`` and the same arguments, in the
same working directory (relative paths keep their meaning), the root of the checkout that holds
the file put in front of ``PYTHONPATH`` for that one start (``-P``: not the working directory,
which may be another checkout); ``tools/__init__.py`` restores the caller's ``PYTHONPATH``
at once, so nothing the tool starts sees the change. (Re-executing, rather than ``runpy`` in
this process, also gives the tools that start worker processes, ``spawn`` included, a path
on which their workers find the ``tools`` package.) Standard library only: this module is
imported before the ``tools`` package exists in the process.
"""

import os
import sys
from pathlib import Path


def run_as_module(file: str) -> None:
    """Replace this process with ``python -m tools.<file's stem>`` and the same arguments."""
    script = Path(file).resolve()
    root = str(script.parent.parent)
    caller = os.environ.get("PYTHONPATH", "")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (root, caller) if p),
        "SELFATTN_TOOLS_CALLER_PYTHONPATH": caller,
    }
    sys.stdout.flush()
    sys.stderr.flush()
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    argv = [sys.executable, *safe_path, "-m", f"tools.{script.stem}", *sys.argv[1:]]
    os.execve(sys.executable, argv, env)
