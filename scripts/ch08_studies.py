"""Chapter 8's studies over 20 instances, computed once and stored with the library.

Mirror descent against the l_q W-SVMs (``ch08.md_study``, from W_0 = 0 and, for seeds 1-10, from
the authors' standard normal start), the rates of GD, NGD and the Polyak step
(``ch08.rate_study``), the margin ratios of NGD, sign descent, spectral descent and Adam
(``ch08.steepest_study``) and Adam's throttled gaps (``ch08.adam_throttle``), on the instances
``ch08.authors_instance(seed)``. The chapter reads the file (``ch08.load_studies``) and recomputes
the first seeds of every study to check that the file is what this code computes.

Run from the repository's root (a few minutes on one core):

    python scripts/ch08_studies.py          # writes lib/maxmargin/book/data/ch08_studies.json
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lib"))

import numpy as np  # noqa: E402

import maxmargin  # noqa: E402
from maxmargin.book import ch08  # noqa: E402

OUT = ROOT / "lib" / "maxmargin" / "book" / "data" / "ch08_studies.json"


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def main() -> None:
    start = time.time()
    studies = ch08.compute_studies(progress=True)
    table = {"made by": "scripts/ch08_studies.py", "library": maxmargin.__version__} | studies
    OUT.write_text(json.dumps(_jsonable(table), separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1e3:.0f} kB) in "
          f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
