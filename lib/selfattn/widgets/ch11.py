"""Chapter 11's explorer: a KV-cache calculator for five published models.

Each view plots the cache of one sequence (all layers, bf16) against the context length for
the five models of :data:`selfattn.cache_sizes.PUBLISHED`, the chosen one in colour, up to the
chosen longest context; every view is drawn in advance, so the controls also work on the
static website.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cache_sizes import PUBLISHED, cache_bytes

__all__ = ["plot_cache_growth", "explorer", "CONTEXTS"]

#: The longest contexts the explorer offers (tokens).
CONTEXTS = (4096, 32768, 131072)


def plot_cache_growth(chosen: str = "DeepSeek-V3", max_context: int = 131072, ax=None):
    """GiB of KV cache (one sequence, every layer) against the context, one line per model.

    Args:
        chosen: the model drawn in colour (a key of ``PUBLISHED``); the others are grey.
        max_context: the longest context on the x axis (tokens).
        ax: matplotlib axes to draw on (a new figure when ``None``).

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if chosen not in PUBLISHED:
        raise ValueError(f"chosen must be one of {list(PUBLISHED)}, got {chosen!r}")
    if not isinstance(max_context, int) or max_context < 2:
        raise ValueError(f"max_context must be an int >= 2, got {max_context!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    # 65 even steps, plus every window's length, so that the kink where a windowed model's
    # local layers stop growing is drawn at any zoom
    windows = [cfg.window for cfg in PUBLISHED.values() if cfg.window and cfg.window < max_context]
    ctx = np.unique(np.r_[np.linspace(0, max_context, 65).astype(int), windows])
    for name, cfg in PUBLISHED.items():
        gib = [cache_bytes(cfg, int(c)) / 2**30 for c in ctx]
        if name == chosen:
            ax.plot(ctx / 1024, gib, color="#d1495b", lw=2.4, label=name, zorder=3)
        else:
            ax.plot(ctx / 1024, gib, color="#9a9a9a", lw=1.0, label=name)
            ax.text(ctx[-1] / 1024, gib[-1], f" {name}", fontsize=7, va="center", color="#666")
    top = cache_bytes(PUBLISHED[chosen], max_context) / 2**30
    ax.set(
        xlabel="context (thousands of tokens)",
        ylabel="KV cache (GiB, bf16, one sequence)",
        title=f"{chosen}: {top:.2f} GiB at {max_context // 1024}K tokens",
        xlim=(0, max_context / 1024 * 1.3),
    )
    ax.legend(loc="upper left", fontsize=7)
    return ax


def explorer(
    models: Sequence[str] | None = None,
    contexts: Sequence[int] = CONTEXTS,
    *,
    model: str = "DeepSeek-V3",
):
    """Pick a model and the longest context: the KV cache of each model against the context.

    Returns:
        An ``ipywidgets.VBox`` whose views are all precomputed.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    models = list(PUBLISHED) if models is None else list(models)
    for name in models:
        if name not in PUBLISHED:
            raise ValueError(f"unknown model {name!r}; expected some of {list(PUBLISHED)}")
    if model not in models:
        raise ValueError(f"model must be one of {models}, got {model!r}")

    def render(name: str, context: int):
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        plot_cache_growth(name, context, ax=ax)
        fig.tight_layout()
        return fig

    def alt(name: str, context: int) -> str:
        sizes = ", ".join(
            f"{m} {cache_bytes(PUBLISHED[m], context) / 2**30:.2f} GiB" for m in models
        )
        return (
            f"The KV cache of one sequence in bf16 against the context length up to "
            f"{context} tokens, {name} highlighted; at {context} tokens: {sizes}"
        )

    return grid_explorer(
        [
            Control("model", models, value=model, kind="dropdown"),
            Control("context", [(f"{c // 1024}K", c) for c in contexts], value=contexts[-1]),
        ],
        render,
        alt=alt,
    )
