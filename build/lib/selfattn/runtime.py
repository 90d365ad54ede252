"""The one call every chapter's setup cell makes: seeds, plot style, device."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["setup", "get_device", "show_progress"]


def get_device() -> torch.device:
    """CUDA when available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
        }
    )


def show_progress() -> bool:
    """Whether long loops should draw a progress bar.

    ``make execute`` and the nbval tests set ``SELFATTN_PROGRESS=0`` so that
    committed outputs hold no timing noise and nothing is written to stderr.
    """
    return os.environ.get("SELFATTN_PROGRESS", "1") != "0"
