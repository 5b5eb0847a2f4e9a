"""Memory of long runs: with record_every=None a run's peak memory does not grow with its steps.

Each measurement runs in a fresh interpreter and reads the peak resident set size
(``resource.getrusage(...).ru_maxrss``) before and after the run, after a warm-up run of the same
shape (so that imports, numba's compiled kernel and torch's allocator are in the baseline). It
catches any buffer of O(steps) size: at 10^5 steps x 64 starts x d = 10 the iterates alone would
take 512 MB, at 10^4 steps 51 MB.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import maxmargin

LIB = str(Path(maxmargin.__file__).parent.parent)
SCRIPT = """
import json, resource, sys
import numpy as np
import maxmargin as mm
steps, starts = int(sys.argv[1]), int(sys.argv[2])
X = np.random.default_rng(0).standard_normal((1, 2, 10))
P0 = np.random.default_rng(1).standard_normal((starts, 10))
mm.gd(X, [1.0], np.ones(10), P0, 10, 0.1, normalized=True, record_every=None)  # warm-up
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
run = mm.gd(X, [1.0], np.ones(10), P0, steps, 0.1, normalized=True, record_every=None)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert run.p.shape == (2, starts, 10) and np.all(np.isfinite(run.p))
print(json.dumps({"engine": mm.train.engine(), "peak_mb": (after - before) / 1024}))
"""


def peak_above_baseline(steps: int, starts: int, engine: str) -> float:
    """MB by which one gd run raised the peak RSS of a fresh process."""
    env = dict(os.environ, MAXMARGIN_ENGINE=engine,
               PYTHONPATH=os.pathsep.join([LIB] + [p for p in os.environ.get("PYTHONPATH", "")
                                                   .split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(steps), str(starts)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["engine"] == engine
    return result["peak_mb"]


@pytest.mark.parametrize("engine, long_run", [("compiled", 100_000), ("torch", 10_000)])
def test_memory_does_not_grow_with_steps(engine, long_run):
    """64 starts, d = 10: the peak above baseline at 10^3 steps and at ``long_run`` steps differ
    by less than 10 MB (recording every step would add 512 MB of iterates at 10^5 steps, 51 MB
    at 10^4 for the slower torch loop)."""
    short = peak_above_baseline(1_000, 64, engine)
    long = peak_above_baseline(long_run, 64, engine)
    assert long - short < 10.0, f"{engine}: {short:.1f} MB at 1000 steps, {long:.1f} MB at {long_run}"


def test_full_batch_stays_under_200_mb():
    """1024 starts x d = 10 with record_every=None: under 200 MB above the baseline (10^4 steps;
    the test above shows that the peak does not depend on the number of steps)."""
    assert peak_above_baseline(10_000, 1024, "compiled") < 200.0
