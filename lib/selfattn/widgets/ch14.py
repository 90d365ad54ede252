"""Chapter 14's explorer: causal ring attention step by step, in either layout.

The causal score matrix, cut into ``2 P`` chunks each way, fills in as the ring turns: at
step ``s`` rank ``r`` holds the key/value block of rank ``r - s`` and computes the blocks of
its query chunks against it that causal masking does not hide entirely. Beside it, each
rank's work so far, in chunk blocks. With contiguous shards the last rank works at every
step while the first idles after step 1; with zigzag shards every rank does the same work.
"""

from __future__ import annotations

from ..distributed import LAYOUTS, chunk_ids

__all__ = ["EXPLORER_SIZES", "ring_schedule", "plot_ring_step", "plot_work_grid", "explorer"]

EXPLORER_SIZES: tuple[int, ...] = (2, 4)  #: the explorer's numbers of ranks P


def ring_schedule(world_size: int, layout: str) -> list[list[tuple[int, int, int]]]:
    """For each step, the chunk blocks computed: ``(rank, query chunk, key chunk)``.

    The sequence is cut into ``2 P`` chunks (so both layouts draw on one grid); a rank's
    contiguous shard is chunks ``2r, 2r + 1``, its zigzag shard chunks ``r, 2P - 1 - r``.
    A block is computed when its key chunk is not after its query chunk (causal).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not isinstance(world_size, int) or not 1 <= world_size <= 8:
        raise ValueError(f"world_size must be an int from 1 to 8, got {world_size!r}")
    P = world_size

    def chunks(r: int) -> list[int]:
        if layout == "zigzag":
            return chunk_ids(r, P, "zigzag")
        return [2 * r, 2 * r + 1]

    steps = []
    for s in range(P):
        done = []
        for r in range(P):
            src = (r - s) % P
            done += [(r, a, b) for a in chunks(r) for b in chunks(src) if b <= a]
        steps.append(done)
    return steps


def plot_ring_step(world_size: int = 4, layout: str = "contiguous", step: int = 1, axes=None):
    """Two panels after ``step`` steps (1-based): the blocks computed so far, and the work.

    Returns:
        The two matplotlib axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from ..diagrams import _HEAD_COLORS, PALETTE

    sched = ring_schedule(world_size, layout)
    P = world_size
    if not 1 <= step <= P:
        raise ValueError(f"step must be in 1..{P} for P={P}, got {step}")
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
    ax_m, ax_w = axes
    c = 2 * P
    ax_m.set_xlim(0, c)
    ax_m.set_ylim(c, 0)
    ax_m.set_aspect("equal")
    for a in range(c):
        for b in range(c):
            ax_m.add_patch(Rectangle((b, a), 1, 1, facecolor=PALETTE["masked"], ec="white"))
    work = [0] * P
    for s in range(step):
        for r, a, b in sched[s]:
            now = s == step - 1
            ax_m.add_patch(
                Rectangle(
                    (b, a),
                    1,
                    1,
                    facecolor=_HEAD_COLORS[r],
                    ec=PALETTE["highlight"] if now else "white",
                    lw=2.0 if now else 0.8,
                )
            )
            work[r] += 1
    ax_m.set_title(f"{layout}, P = {P}: step {step}/{P} (red edge: now)")
    ax_m.set_xlabel("key chunk")
    ax_m.set_ylabel("query chunk")
    ax_w.bar(range(P), work, color=[_HEAD_COLORS[r] for r in range(P)], edgecolor="black")
    total = [sum(1 for s in sched for r2, _, _ in s if r2 == r) for r in range(P)]
    ax_w.plot(range(P), total, "k_", markersize=22, label="after the last step")
    ax_w.set_ylim(0, max(4 * P - 1, 1) + 1)
    ax_w.set_xticks(range(P))
    ax_w.set_xlabel("rank")
    ax_w.set_ylabel("chunk blocks computed")
    ax_w.set_title(f"work so far: {work}")
    ax_w.legend(loc="upper left", fontsize=8)
    return axes


def plot_work_grid(world_size: int = 4):
    """The static figure beside the explorer: the last step in each layout, side by side.

    Returns:
        The matplotlib figure (four panels).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9.0, 6.6))
    for row, layout in zip(axes, LAYOUTS):
        plot_ring_step(world_size, layout, world_size, axes=row)
    fig.tight_layout()
    return fig


def explorer(*, world_size: int = 4):
    """The interactive view: the layout, the number of ranks and the step.

    Every view is drawn in advance over the two layouts x ``EXPLORER_SIZES`` x the steps
    ``1 .. max(EXPLORER_SIZES)``; a step past the last one of a smaller P shows its last
    step, and the view says so.

    Returns:
        An ``ipywidgets.VBox``.
    """
    import matplotlib.pyplot as plt

    from ._explorer import Control, grid_explorer

    if world_size not in EXPLORER_SIZES:
        raise ValueError(f"world_size must be one of {EXPLORER_SIZES}, got {world_size!r}")
    max_steps = max(EXPLORER_SIZES)

    def render(layout: str, P: int, step: int):
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6))
        plot_ring_step(P, layout, min(step, P), axes=axes)
        fig.subplots_adjust(left=0.07, right=0.98, bottom=0.15, top=0.9, wspace=0.3)
        return fig

    def alt(layout: str, P: int, step: int) -> str:
        shown = min(step, P)
        sched = ring_schedule(P, layout)
        work = [sum(1 for s in sched[:shown] for r2, _, _ in s if r2 == r) for r in range(P)]
        note = "" if shown == step else f" (P = {P} has only {P} steps: the last shown)"
        return (
            f"Causal ring attention with {layout} shards over {P} ranks after step {shown}"
            f"{note}: the chunk blocks of the score matrix computed so far, coloured by rank, "
            f"and each rank's work so far in chunk blocks, {work}"
        )

    return grid_explorer(
        [
            Control("layout", list(LAYOUTS), kind="toggle"),
            Control("P", list(EXPLORER_SIZES), value=world_size),
            Control("step", list(range(1, max_steps + 1))),
        ],
        render,
        alt=alt,
        view_key=lambda layout, P, step: (layout, P, min(step, P)),
    )
