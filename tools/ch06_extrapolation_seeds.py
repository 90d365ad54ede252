"""Chapter 6's extrapolation experiment over several seeds (too slow to run live).

The chapter trains four of the six encodings live on seed 0 and shows beside them the
table this script records: every encoding trained and tested on each seed with the
chapter's budget (:func:`selfattn.models.extrapolation_study`). On the machine that recorded
the table, its seed 0 is the chapter's live run; another CPU rounds differently and a model
trained for 600 steps then ends a little elsewhere, so the chapter checks that the live run
falls within five percentage points of the seeds' range.

    .venv/bin/python tools/ch06_extrapolation_seeds.py            # seeds 0-4, ~3 min CPU
    .venv/bin/python tools/ch06_extrapolation_seeds.py --seeds 0 1 2 --out /tmp/x.json
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # python tools/NAME.py: as -m tools.NAME
    import _script  # tools/ is on the path of a script run as a file

    _script.run_as_module(__file__)

from selfattn.models import extrapolation_study

from tools._precompute import RESULTS, seed_study_main

DEFAULT_OUT = RESULTS / "ch06_seeds.json"


def main(argv: list[str] | None = None) -> None:
    seed_study_main(__doc__, extrapolation_study, DEFAULT_OUT, argv)


if __name__ == "__main__":
    main()
