"""Largest |selfattn.scaled_dot_product_attention - torch SDPA| over random inputs, in float32.

    .venv/bin/python tools/measure_sdpa_diff.py [cases]

The tests (tests/test_attention.py) allow 1e-5; this prints what is observed over random
batch shapes, n, m, d_k, d_v in 1..64 and masks of every kind (none, random bool that may
mask whole rows, float, causal).
"""

import sys

import torch
import torch.nn.functional as F
from selfattn import causal_mask, scaled_dot_product_attention


def main(cases: int = 2000) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for trial in range(cases):
        batch_rank = int(torch.randint(0, 3, (1,), generator=g))
        batch = [int(b) for b in torch.randint(1, 4, (batch_rank,), generator=g)]
        n, m, d_k, d_v = (int(x) for x in torch.randint(1, 65, (4,), generator=g))
        q = torch.randn(*batch, n, d_k, generator=g)
        k = torch.randn(*batch, m, d_k, generator=g)
        v = torch.randn(*batch, m, d_v, generator=g)
        masks = [
            None,
            torch.rand(*batch, n, m, generator=g) > 0.4,
            torch.randn(n, m, generator=g),
            causal_mask(n, m, alignment="top_left"),  # no row fully masked: SDPA would give NaN
        ]
        mask = masks[trial % 4]
        ours = scaled_dot_product_attention(q, k, v, mask)
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        worst = max(worst, (ours - theirs).abs().max().item())
    print(
        f"{cases} random cases (n, m, d_k, d_v in 1..64; masks none/bool/float/causal): "
        f"max |diff| = {worst:.2e}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
