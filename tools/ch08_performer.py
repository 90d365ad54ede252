"""Precompute chapter 8's random-feature study: chapters/results/ch08_performer.json.

Relative error of Performer's attention (FAVOR+, positive random features) against exact
softmax attention, for 16 to 4096 features, independent and orthogonal draws, three input
scales, 5 draws each (n = 128 queries and keys, d = 32, float64); and, on the same inputs, the
error of linear attention with ELU + 1 features, which has no features to add. About a minute
of one CPU core:

    .venv/bin/python tools/ch08_performer.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.efficient.linear import linear_attention
from selfattn.efficient.performer import performer_attention

from tools._precompute import RESULTS, parser, write_json

OUT = RESULTS / "ch08_performer.json"
FEATURES = (16, 64, 256, 1024, 4096)
SCALES = (0.25, 0.5, 1.0)
DRAWS = 5
N, D = 128, 32


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out - ref).norm() / ref.norm()).item()


def main(argv: list[str] | None = None) -> None:
    out = parser(__doc__, OUT).parse_args(argv).out
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(N, D, generator=g, dtype=torch.float64) for _ in range(3))
    rows = []
    for scale in SCALES:
        qs, ks = q * scale, k * scale
        ref = F.scaled_dot_product_attention(qs, ks, v)
        root = D**-0.25  # softmax's 1/sqrt(d), split between q and k
        elu = rel_err(linear_attention(qs * root, ks * root, v), ref)
        rows.append({"method": "elu", "scale": scale, "features": None, "errors": [elu]})
        for orthogonal in (False, True):
            for r in FEATURES:
                errs = [
                    rel_err(
                        performer_attention(
                            qs,
                            ks,
                            v,
                            num_features=r,
                            orthogonal=orthogonal,
                            generator=torch.Generator().manual_seed(100 * r + s),
                        ),
                        ref,
                    )
                    for s in range(DRAWS)
                ]
                method = "orthogonal" if orthogonal else "iid"
                rows.append({"method": method, "scale": scale, "features": r, "errors": errs})
                print(scale, method, r, [round(e, 3) for e in errs], flush=True)
    config = {"n": N, "d": D, "draws": DRAWS, "features": list(FEATURES), "scales": list(SCALES)}
    write_json(out, {"config": config, "rows": rows})
    print("wrote", out)


if __name__ == "__main__":
    main()
