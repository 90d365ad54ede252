"""Chapter 2's explorer: where does "it" look? Attention weights of a trained coreference model.

Pick a sentence, a layer, a head and a temperature; the view shows the weights from ``it``
to every token as bars (the correct antecedent in green, the other noun in red) and the
whole weight matrix of that layer and head as a heatmap. The temperature divides the
model's scaled scores (1 = as trained), as in
:meth:`selfattn.models.tiny_attention.SelfAttention.forward`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..data.coreference import CorefExample, CorefTask
from ..viz import plot_attention

__all__ = [
    "TEMPERATURES",
    "sentence_weights",
    "model_answer",
    "plot_sentence",
    "plot_sentences",
    "explorer",
]

TEMPERATURES: tuple[float, ...] = (0.3, 1.0, 3.0)  #: the explorer's temperatures


def sentence_weights(
    model, task: CorefTask, example: CorefExample, *, temperature: float = 1.0
) -> list[np.ndarray]:
    """Weights of every layer for one sentence.

    Returns:
        A list of ``(n_heads, n, n)`` arrays, one per layer (rows are queries).
    """
    ids = task.encode(list(example.tokens))[None].to(next(model.parameters()).device)
    with torch.no_grad():
        _, weights = model(
            ids,
            torch.tensor([example.it_position], device=ids.device),
            temperature=temperature,
            return_weights=True,
        )
    return [w[0].cpu().numpy() for w in weights]


def model_answer(model, task: CorefTask, example: CorefExample) -> str:
    """The noun the model names for "it" in one sentence (its argmax over the nouns)."""
    device = next(model.parameters()).device
    ids = task.encode(list(example.tokens))[None].to(device)
    with torch.no_grad():
        logits = model(ids, torch.tensor([example.it_position], device=device))
    return task.nouns[int(logits[0].argmax())]


def _answer_title(model, task: CorefTask, example: CorefExample) -> tuple[str, str]:
    """``(title line, colour)``: the model's answer and whether it is right."""
    answer = model_answer(model, task, example)
    if answer == example.antecedent:
        return f"model: {answer} (right)", "tab:green"
    return f"model: {answer} (wrong; it = {example.antecedent})", "tab:red"


def plot_sentence(
    model,
    task: CorefTask,
    example: CorefExample,
    *,
    layer: int = -1,
    head: int = 0,
    temperature: float = 1.0,
    axes=None,
):
    """Bars of the weights from ``it`` (left) and the full heatmap (right) for one layer and head.

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt

    weights = sentence_weights(model, task, example, temperature=temperature)
    n_layers = len(weights)
    layer_index = layer % n_layers
    if not 0 <= head < weights[layer_index].shape[0]:
        raise ValueError(f"head must be in 0..{weights[layer_index].shape[0] - 1}, got {head}")
    w = weights[layer_index][head]
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [1.2, 1]})
    row = w[example.it_position]
    colors = ["tab:gray"] * len(row)
    colors[example.antecedent_position] = "tab:green"
    colors[example.other_position] = "tab:red"
    axes[0].bar(range(len(row)), row, color=colors)
    axes[0].set_xticks(range(len(row)), labels=list(example.tokens), rotation=45, ha="right")
    axes[0].set_ylim(0, 1)
    axes[0].set_xlabel("key token (green: antecedent, red: the other noun)")
    axes[0].set_ylabel("weight from 'it'")
    verdict, _ = _answer_title(model, task, example)
    axes[0].set_title(
        f"'{example.text}'; {verdict}\n"
        f"layer {layer_index + 1}/{n_layers}, head {head + 1}, T = {temperature:g}: "
        f"{row[example.antecedent_position]:.2f} on '{example.antecedent}'",
        fontsize=9,
    )
    plot_attention(
        w,
        x_labels=list(example.tokens),
        y_labels=list(example.tokens),
        ax=axes[1],
        title=f"All queries, layer {layer_index + 1}, head {head + 1}",
        annotate=False,
    )
    return axes


def plot_sentences(
    model, task: CorefTask, examples: Sequence[CorefExample], *, layer: int = -1, head: int = 0
):
    """Bars of the weights from ``it`` for several sentences, one panel each (the static figure).

    Each panel's title gives the model's answer and whether it is right (green) or wrong
    (red, with the correct antecedent).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(examples), figsize=(3.6 * len(examples), 3.6), sharey=True, squeeze=False
    )
    for ax, example in zip(axes[0], examples):
        w = sentence_weights(model, task, example)[layer][head][example.it_position]
        colors = ["tab:gray"] * len(w)
        colors[example.antecedent_position] = "tab:green"
        colors[example.other_position] = "tab:red"
        ax.bar(range(len(w)), w, color=colors)
        ax.set_xticks(
            range(len(w)), labels=list(example.tokens), rotation=60, ha="right", fontsize=8
        )
        ax.set_ylim(0, 1)
        verdict, color = _answer_title(model, task, example)
        ax.set_title(f"... it was too {example.adjective}\n{verdict}", fontsize=9, color=color)
    axes[0, 0].set_ylabel("weight from 'it'")
    fig.supxlabel("key token (green: antecedent, red: the other noun)", fontsize=9)
    fig.tight_layout()
    return fig


def explorer(
    model,
    task: CorefTask,
    examples: Sequence[CorefExample],
    *,
    layer: int = -1,
    head: int = 0,
    temperature: float = 1.0,
    n_sentences: int = 10,
):
    """The interactive view: sentence, layer, head (when there are several) and temperature.

    Every view is drawn in advance for the first ``n_sentences`` sentences, every layer and
    head and the temperatures ``TEMPERATURES``, so the controls also work on the static
    website.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if not examples:
        raise ValueError("explorer needs at least one example sentence")
    if temperature not in TEMPERATURES:
        raise ValueError(f"temperature must be one of {TEMPERATURES}, got {temperature!r}")
    n_layers, n_heads = len(model.blocks), model.blocks[0].attn.num_heads
    if not 0 <= head < n_heads:
        raise ValueError(f"head must be in 0..{n_heads - 1}, got {head}")
    shown = list(examples[:n_sentences])

    def render(sentence: int, layer: int, head: int, temperature: float):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [1.2, 1]})
        plot_sentence(
            model,
            task,
            shown[sentence],
            layer=layer,
            head=head,
            temperature=temperature,
            axes=axes,
        )
        fig.tight_layout()
        return fig

    def alt(sentence: int, layer: int, head: int, temperature: float) -> str:
        e = shown[sentence]
        w = sentence_weights(model, task, e, temperature=temperature)[layer][head]
        return (
            f"Left, bars of the weights from 'it' in '{e.text}'; right, the layer's full "
            f"weight matrix. Weight on the antecedent '{e.antecedent}': "
            f"{w[e.it_position, e.antecedent_position]:.2f}; on '{e.tokens[e.other_position]}': "
            f"{w[e.it_position, e.other_position]:.2f}"
        )

    controls = [
        Control("sentence", [(e.text, i) for i, e in enumerate(shown)], kind="dropdown"),
        Control(
            "layer",
            [(str(i + 1), i) for i in range(n_layers)],
            value=layer % n_layers,
            kind="toggle",
        ),
        Control("head", [(str(h + 1), h) for h in range(n_heads)], value=head, kind="toggle"),
        Control("temperature", TEMPERATURES, value=temperature),
    ]
    if n_heads == 1:  # a control with one position would change nothing

        def with_head(f):
            return lambda sentence, layer, temperature: f(sentence, layer, 0, temperature)

        del controls[2]
        return grid_explorer(controls, with_head(render), alt=with_head(alt))
    return grid_explorer(controls, render, alt=alt)
