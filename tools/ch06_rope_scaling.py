"""Chapter 6's long-context study over several seeds (too slow to run live in full).

A retrieval model is trained at length L = 32 with RoPE, with sinusoidal positions and
with none, and tested at L, 2L and 4L; the RoPE model is also tested with position
interpolation, NTK-aware scaling and YaRN swapped in at the test length
(:func:`selfattn.models.long_context.rope_scaling_study`). The chapter trains seed 0 live
and checks it against this table.

    .venv/bin/python tools/ch06_rope_scaling.py            # seeds 0-4, ~2 min CPU
    .venv/bin/python tools/ch06_rope_scaling.py --seeds 0 1 2 --out /tmp/x.json
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.models.long_context import rope_scaling_study

from tools._precompute import RESULTS, seed_study_main

DEFAULT_OUT = RESULTS / "ch06_rope_scaling.json"


def main(argv: list[str] | None = None) -> None:
    seed_study_main(__doc__, rope_scaling_study, DEFAULT_OUT, argv)


if __name__ == "__main__":
    main()
