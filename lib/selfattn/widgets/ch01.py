"""Chapter 1's explorer: how strongly the last output depends on each earlier input.

Three randomly initialised encoders of the same width read one random sequence: a tanh
RNN, an LSTM and one self-attention layer. For a chosen length ``n`` the view plots
``|| d y[n-1] / d x[t] ||`` (see :func:`selfattn.gradient_reach.gradient_reach`) against the
distance ``n - 1 - t`` on a log scale. The sequence is drawn once at the longest length;
a shorter ``n`` uses its first ``n`` vectors, so the slider changes only the length.

The encoders run in float64 by default: an RNN's reach falls below float32's smallest
positive number (about ``1.4e-45``) within a few hundred steps, and a float64 run shows
the decay itself rather than where float32 gives up.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import torch

from .._checks import require_int
from ..gradient_reach import gradient_reach
from ..models.tiny_attention import SelfAttention

__all__ = [
    "LENGTHS",
    "random_encoders",
    "reach_profiles",
    "lstm_forget_gates",
    "plot_reach",
    "plot_reach_grid",
    "explorer",
]

LENGTHS: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
COLORS = {"RNN (tanh)": "tab:red", "LSTM": "tab:orange", "self-attention": "tab:blue"}


def random_encoders(
    d: int = 16, *, seed: int = 0, dtype: torch.dtype = torch.float64
) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """``{name: encoder}``: a tanh RNN, an LSTM and a self-attention layer of width ``d``.

    PyTorch's default initialisation (drawn in float32, so the weights are the same
    numbers whatever ``dtype``), then cast to ``dtype``. Each encoder maps ``(1, n, d)``
    to ``(1, n, d)`` in that dtype.
    """
    torch.manual_seed(seed)
    rnn, lstm, attention = (
        torch.nn.RNN(d, d, batch_first=True).to(dtype),
        torch.nn.LSTM(d, d, batch_first=True).to(dtype),
        SelfAttention(d).to(dtype),
    )
    return {
        "RNN (tanh)": lambda x: rnn(x)[0],
        "LSTM": lambda x: lstm(x)[0],
        "self-attention": attention,
    }


def reach_profiles(
    n: int, *, d: int = 16, seed: int = 0, dtype: torch.dtype = torch.float64
) -> dict[str, np.ndarray]:
    """``{name: (n,) array}``: entry ``t`` is ``|| d y[n-1] / d x[t] ||``.

    One array per encoder of :func:`random_encoders`, computed in ``dtype`` (float64 by
    default; pass ``torch.float32`` to see where float32 gradients become exactly 0).
    """
    n = require_int(n, "n", 1, LENGTHS[-1])
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    # the chapter asks for the same profiles in several cells (its figure, the explorer's
    # 30 views, the static grid): each is computed once per kernel, and copied out
    return {name: norms.copy() for name, norms in _profiles(n, d, seed, dtype).items()}


@functools.lru_cache(maxsize=64)
def _profiles(n: int, d: int, seed: int, dtype: torch.dtype) -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(LENGTHS[-1], d, generator=gen)[:n].to(dtype)
    # the encoders draw their weights from torch's global generator: leave it as it was
    state = torch.random.get_rng_state()
    try:
        encoders = random_encoders(d, seed=seed, dtype=dtype)
        return {name: gradient_reach(enc, x).numpy() for name, enc in encoders.items()}
    finally:
        torch.random.set_rng_state(state)


@torch.no_grad()
def lstm_forget_gates(lstm: torch.nn.LSTM, x: torch.Tensor) -> torch.Tensor:
    """The forget gates ``f_t`` of a one-layer ``batch_first`` LSTM reading ``x``.

    ``f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)`` with ``h_{-1} = 0``, the factor
    that multiplies the cell state at every step: ``c_t = f_t * c_{t-1} + i_t * g_t``.
    x ``(B, n, d_in)`` -> ``(B, n, hidden)``, in ``x``'s dtype.
    """
    if not isinstance(lstm, torch.nn.LSTM) or lstm.num_layers != 1 or not lstm.batch_first:
        raise ValueError(f"lstm must be a one-layer batch_first torch.nn.LSTM, got {lstm!r}")
    if x.dim() != 3 or x.shape[-1] != lstm.input_size:
        raise ValueError(f"x must have shape (B, n, {lstm.input_size}), got {tuple(x.shape)}")
    hidden = lstm.hidden_size
    h, _ = lstm(x)
    h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
    f = slice(hidden, 2 * hidden)  # PyTorch stacks the gates as (i, f, g, o)
    from_x = x @ lstm.weight_ih_l0[f].T + lstm.bias_ih_l0[f]
    from_h = h_prev @ lstm.weight_hh_l0[f].T + lstm.bias_hh_l0[f]
    return torch.sigmoid(from_x + from_h)


def plot_reach(n: int, *, d: int = 16, seed: int = 0, ax=None):
    """Gradient reach against distance for the three encoders at length ``n`` (log y axis).

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    profiles = reach_profiles(n, d=d, seed=seed)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.5))
    distance = np.arange(n)[::-1]  # input t is n - 1 - t steps before the last output
    for name, norms in profiles.items():
        ax.plot(distance, norms, color=COLORS[name], label=name)
    ax.set_yscale("log")
    ax.set_xlabel("distance n - 1 - t from the last token (tokens)")
    ax.set_ylabel("‖∂y_last / ∂x_t‖ (log scale)")
    ax.set_title(f"Gradient reach at initialisation, n = {n}, d = {d}")
    ax.legend(loc="lower left")
    return ax


def plot_reach_grid(lengths: Sequence[int] = (16, 64, 256), *, d: int = 16, seed: int = 0):
    """The explorer's view for a few lengths side by side (the static figure).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    # no shared y axis: at n = 256 the RNN's reach spans some 90 orders of magnitude
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.3 * len(lengths), 3.6), squeeze=False)
    for ax, n in zip(axes[0], lengths):
        plot_reach(n, d=d, seed=seed, ax=ax)
        if ax is not axes[0, 0]:
            ax.get_legend().remove()
    fig.tight_layout()
    return fig


def explorer(*, n: int = 64, d: int = 16, seed: int = 0):
    """The interactive view: a length slider (8 to 256) and a "draw" slider (0 to 4).

    The draw picks the random weights and inputs. Every view is drawn in advance
    (``len(LENGTHS)`` x 5 = 30), so the controls also work on the static website.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if n not in LENGTHS:
        raise ValueError(f"n must be one of {LENGTHS}, got {n!r}")
    if not 0 <= seed <= 4:
        raise ValueError(f"seed must be from 0 to 4 (the draw slider's range), got {seed!r}")

    def render(length: int, draw: int):
        fig, ax = plt.subplots(figsize=(6.0, 3.6))
        plot_reach(length, d=d, seed=draw, ax=ax)
        fig.tight_layout()
        return fig

    def alt(length: int, draw: int) -> str:
        return (
            "Line plot, log scale: how strongly the last output depends on each earlier "
            f"input at length {length} (width {d}, draw {draw}), for a tanh RNN, an LSTM "
            "and one self-attention layer at initialisation"
        )

    return grid_explorer(
        [Control("length n", LENGTHS, value=n), Control("draw", list(range(5)), value=seed)],
        render,
        alt=alt,
    )
