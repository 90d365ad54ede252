"""Chapter 8's explorer: a sparse attention pattern and what it can reach after L stacked layers.

Left, the mask of one layer (which keys each query may read); right, the receptive
field after ``layers`` layers (which inputs can influence each output), computed by
composing the mask with itself. A sliding window of ``w`` keys reaches ``w - 1``
positions further back per layer; the Sparse Transformer's strided pattern reaches
everything in two layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..efficient.sparse import block_sparse_mask, receptive_field, strided_mask
from ..masks import sliding_window_mask

__all__ = ["PATTERNS", "pattern_mask", "plot_pattern", "plot_explorer_grid", "explorer"]

PATTERNS: tuple[str, ...] = ("sliding window", "strided", "block local + global")


def pattern_mask(pattern: str, n: int, size: int) -> torch.Tensor:
    """The causal ``(n, n)`` bool mask of ``pattern`` with window / stride / block ``size``.

    ``"block local + global"``: each query block reads its own block and the one before
    (local) and block 0 (a global block), a typical block-sparse layout.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if pattern == "sliding window":
        return sliding_window_mask(n, size)
    if pattern == "strided":
        return strided_mask(n, size)
    nb = math.ceil(n / size)
    i = torch.arange(nb)[:, None]
    j = torch.arange(nb)[None, :]
    layout = ((i - j >= 0) & (i - j <= 1)) | (j == 0)
    return block_sparse_mask(n, size, layout) & torch.ones(n, n, dtype=torch.bool).tril()


def plot_pattern(pattern: str, n: int = 32, size: int = 4, layers: int = 2, axes=None):
    """Two heatmaps: one layer's mask and the receptive field after ``layers`` layers.

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt

    mask = pattern_mask(pattern, n, size)
    reach = receptive_field(mask, layers)
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(8.0, 3.8))
    ax_m, ax_r = axes
    ax_m.imshow(mask.numpy(), cmap="gray", vmin=0, vmax=1)
    ax_m.set_title(
        f"{pattern} (size {size}): one layer\n{int(mask.sum())} of {n * (n + 1) // 2} causal pairs"
    )
    ax_r.imshow(reach.numpy(), cmap="magma", vmin=0, vmax=1)
    ax_r.set_title(
        f"reach after {layers} layer(s): last output sees\n{int(reach[-1].sum())} of {n} inputs"
    )
    for ax in axes:
        ax.grid(False)
        ax.set_xlabel("key / input position j")
        ax.set_ylabel("query / output position i")
    return axes


def plot_explorer_grid(
    patterns: Sequence[str] = PATTERNS, *, n: int = 32, size: int = 4, layers: int = 2
):
    """The explorer's view for each pattern, one row each (the static figure).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(patterns), 2, figsize=(8.0, 3.7 * len(patterns)), squeeze=False)
    for row, pattern in enumerate(patterns):
        plot_pattern(pattern, n, size, layers, axes=axes[row])
    fig.suptitle(f"Sparse patterns (n = {n}, size {size}): mask and reach after {layers} layers")
    fig.tight_layout()
    return fig


def explorer(*, pattern: str = "sliding window", n: int = 32, size: int = 4, layers: int = 1):
    """The interactive view: pattern, n (8 to 64), window / stride / block size, layers (1-8).

    Returns:
        An ``ipywidgets.VBox``.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    pattern_w = widgets.Dropdown(options=list(PATTERNS), value=pattern, description="pattern")
    n_w = widgets.IntSlider(value=n, min=8, max=64, description="n")
    size_w = widgets.IntSlider(value=size, min=1, max=16, description="size")
    layers_w = widgets.IntSlider(value=layers, min=1, max=8, description="layers")
    out = widgets.Output()

    def on_change(_change=None) -> None:
        with out:
            out.clear_output(wait=True)
            fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.8))
            plot_pattern(pattern_w.value, n_w.value, size_w.value, layers_w.value, axes=axes)
            fig.tight_layout()
            display(fig)
            plt.close(fig)

    for control in (pattern_w, n_w, size_w, layers_w):
        control.observe(on_change, names="value")
    on_change()
    return widgets.VBox([widgets.HBox([pattern_w, n_w]), widgets.HBox([size_w, layers_w]), out])
