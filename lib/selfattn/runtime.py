"""The one call every chapter's setup cell makes: seeds, plot style, device; the GPU dtype.

Chapters never write ``"cuda"`` or ``.cuda()``: they move models and tensors with
``.to(device)``, ``device`` coming from :func:`setup` (or :func:`get_device`), and take the
half-precision dtype from :func:`preferred_dtype`.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["setup", "get_device", "preferred_dtype", "show_progress"]


def get_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def preferred_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """The dtype to compute in on ``device``: bfloat16, float16 or float32.

    bfloat16 where the GPU runs it natively (compute capability 8.0 and up: A100, H100,
    RTX 30xx and later), float16 on older GPUs (Colab's T4 is 7.5: there bf16 is emulated,
    and Triton's bf16 ``tl.dot`` does not compile), float32 on the CPU. ``device`` defaults to
    :func:`get_device`.
    """
    device = get_device() if device is None else torch.device(device)
    if device.type != "cuda":
        return torch.float32
    with torch.cuda.device(device):
        # Not counting emulation: torch >= 2.3 says True on a T4, where bf16 runs emulated.
        native = torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.bfloat16 if native else torch.float16


def setup(seed: int = 0, *, num_threads: int = 1) -> torch.device:
    """Seed python, numpy and torch, set the plot style, and return the device.

    ``num_threads`` fixes torch's CPU thread count. One thread by default, because
    the committed notebook outputs must reproduce exactly under nbval on any
    machine, and a reduction split over a different number of threads can round
    differently. The book's models are small enough that this costs little.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(num_threads)
    _set_plot_style()
    _record_svg_figures()
    return get_device()


def _set_plot_style() -> None:
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 100,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 9,
            "image.cmap": "viridis",
            # SVG element ids from a fixed salt, not a random one: a re-recorded figure
            # that did not change leaves the notebook unchanged.
            "svg.hashsalt": "selfattn",
        }
    )


def _record_svg_figures() -> None:
    """Where the book is recorded (or tested), every figure is saved as SVG next to its PNG.

    The website shows the PNG and offers the SVG as a download under the figure, for lecture
    slides (``_ext/book_figures.py``); a reader's own Jupyter or Colab gets the PNG alone.
    Both are output formats of the one figure, set on IPython's inline backend, so diagrams
    and plots alike carry both; outside IPython there is nothing to set.
    """
    from .results import recording

    if not recording():
        return
    try:
        from IPython import get_ipython
        from matplotlib_inline.config import InlineBackend
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    # The inline backend's own configurable: with its shell set, changing the formats
    # registers the figure formatters now (a diagram may be shown before pyplot is imported),
    # and the backend reads the same setting when pyplot's import activates it.
    config = InlineBackend.instance(parent=shell)
    config.shell = shell
    config.figure_formats = {"png", "svg"}


def show_progress() -> bool:
    """Whether long loops should draw a progress bar.

    ``make execute`` and the nbval tests set ``SELFATTN_PROGRESS=0`` so that
    committed outputs hold no timing noise and nothing is written to stderr.
    """
    return os.environ.get("SELFATTN_PROGRESS", "1") != "0"
