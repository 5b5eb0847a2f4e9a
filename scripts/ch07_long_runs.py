"""Chapter 7's long exact-step runs, computed once and stored with the library.

Normalized GD on (K, Q) with the step of :func:`maxmargin.exactstep.ngd_KQ_exact` (exact at
every gap, no ceiling) on the 100 instances of the chapter's study, in the settings of
``maxmargin.book.ch07.EXACT_SETTINGS``: 60,000 steps from the small start with per-factor and
with joint normalization, 20,000 steps from starts 1, 10 and 100 times as large. The chapter
reads the file (``ch07.load_exact_runs``) and recomputes every run's first 2000 steps to check
that the file is what this code computes.

Run from the repository's root (about 2 minutes on one core):

    python scripts/ch07_long_runs.py          # writes lib/maxmargin/book/data/ch07_long_runs.json
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
from maxmargin.book import ch07  # noqa: E402

OUT = ROOT / "lib" / "maxmargin" / "book" / "data" / "ch07_long_runs.json"
COUNT, SEED = 100, 0


def main() -> None:
    start = time.time()
    runs = ch07.exact_runs(COUNT, seed=SEED, progress=True)
    table = {"made by": "scripts/ch07_long_runs.py", "library": maxmargin.__version__,
             "count": COUNT, "seed": SEED, "lr": ch07.NGD["lr"],
             "settings": [list(s) for s in ch07.EXACT_SETTINGS],
             "runs": {name: {key: np.asarray(value).tolist() for key, value in row.items()}
                      for name, row in runs.items()}}
    OUT.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size / 1e3:.0f} kB) in "
          f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
