"""Benchmark: the fast ATT-SVM solver against cvxpy + Clarabel.

Two instances, each timed with ``att_svm(..., solver="fast")`` and ``att_svm(..., solver="cvxpy")``
(a fresh cvxpy problem each call), interleaved:

* "chapter 02": the small random instance on which chapter 02 compares the two solvers,
  ``maxmargin.data.gaussian_instance(3, 5, 3, seed=1)`` with its first feasible selection
  (12 constraints). The chapter keeps only the agreement of the two solutions; the timing
  lives here, because a speed-up is a property of the machine, not of the mathematics.
* "planted": a planted-feasible instance with (n, T, d) = (100, 10, 10), 900 constraints.

Bars, for each instance: the fast solver is at least 10x faster (ratio of medians) and the two
solutions differ by at most 1e-6. Prints an estimate of its total run time first (from one timed
call of each solver per instance), a progress line per instance as it goes, and ends with PASS or
FAIL and the reason in words. Exits with status 1 when a bar is missed.

Run from the repository root: ``.venv/bin/python benchmarks/bench_svm.py``.
"""
from __future__ import annotations

import gc
import sys
import time

import numpy as np

from maxmargin.data import gaussian_instance
from maxmargin.optimality import feasible_selections
from maxmargin.svm import att_svm

N, T, D = 100, 10, 10
REPEATS = 21
SPEEDUP_BAR = 10.0
AGREEMENT_BAR = 1e-6


def planted_instance(rng: np.random.Generator, n: int, T: int, d: int, gap: float = 0.1):
    """Random tokens whose selected token is pushed ahead of the others along a random direction."""
    X = rng.normal(size=(n, T, d))
    alpha = rng.integers(0, T, size=n)
    r = rng.normal(size=d)
    r /= np.linalg.norm(r)
    for i in range(n):
        lead = np.delete(X[i] @ r, alpha[i]).max() - X[i, alpha[i]] @ r
        X[i, alpha[i]] += (max(lead, 0.0) + gap) * r
    return X, alpha


def chapter_instance():
    """The instance and selection of chapter 02's solver comparison."""
    inst = gaussian_instance(3, 5, 3, seed=1)
    alpha = np.array(feasible_selections(inst.X, inst.Y, inst.v)[0].alpha)
    return inst.X, alpha


def timed(solver: str, X: np.ndarray, alpha: np.ndarray) -> tuple[float, np.ndarray]:
    """One call, timed like ``timeit`` does: with the garbage collector off."""
    gc.disable()
    try:
        start = time.perf_counter()
        result = att_svm(X, alpha, solver=solver)
        return time.perf_counter() - start, result.p
    finally:
        gc.enable()


def compare(label: str, X: np.ndarray, alpha: np.ndarray) -> list[str]:
    """Time both solvers on one instance, print the medians; return the bars it misses, in words."""
    n, T_, d = X.shape
    print(f"ATT-SVM, {label}: (n, T, d) = ({n}, {T_}, {d}), {n * (T_ - 1)} constraints, "
          f"{REPEATS} repetitions", flush=True)
    times: dict[str, list[float]] = {"fast": [], "cvxpy": []}
    solutions: dict[str, np.ndarray] = {}
    started = time.perf_counter()
    for rep in range(REPEATS):
        for solver in times:
            seconds, solutions[solver] = timed(solver, X, alpha)
            times[solver].append(seconds)
        if (rep + 1) % 7 == 0 or rep + 1 == REPEATS:
            print(f"  repetition {rep + 1}/{REPEATS}  ({time.perf_counter() - started:.1f} s)",
                  flush=True)

    fast, slow = (float(np.median(times[s])) for s in ("fast", "cvxpy"))
    warm = float(np.median([timed("fast", X, alpha)[0] for _ in range(REPEATS)]))
    ratio = slow / fast
    difference = float(np.max(np.abs(solutions["fast"] - solutions["cvxpy"])))
    print(f"  fast (NNLS least-distance):  median {fast * 1e3:8.3f} ms")
    print(f"  cvxpy + Clarabel:            median {slow * 1e3:8.3f} ms")
    print(f"  (fast back-to-back, warm caches: median {warm * 1e3:.3f} ms; not used for the bar)")
    print(f"  speed-up:                    {ratio:8.1f}x   (bar >= {SPEEDUP_BAR:g}x)")
    print(f"  max |p_fast - p_cvxpy|:      {difference:8.1e}   (bar <= {AGREEMENT_BAR:g})",
          flush=True)
    missed = []
    if ratio < SPEEDUP_BAR:
        missed.append(f"on the {label} instance the fast solver is only {ratio:.1f} times as fast "
                      f"as cvxpy + Clarabel (the bar is at least {SPEEDUP_BAR:g} times)")
    if not difference <= AGREEMENT_BAR:
        missed.append(f"on the {label} instance the two solutions differ by {difference:.1e} "
                      f"(the bar is at most {AGREEMENT_BAR:g})")
    return missed


def estimate(cases) -> float:
    """Seconds the measurement will take, from one timed call of each solver per instance (after
    a warm-up call that loads imports and caches, as the measurement needs anyway)."""
    total = 0.0
    for _, X, alpha in cases:
        timed("fast", X, alpha), timed("cvxpy", X, alpha)  # warm up imports and caches
        per_round = sum(timed(solver, X, alpha)[0] for solver in ("fast", "cvxpy"))
        total += per_round * REPEATS + timed("fast", X, alpha)[0] * REPEATS
    return total


def main() -> int:
    start = time.perf_counter()
    cases = [("chapter 02", *chapter_instance()),
             ("planted", *planted_instance(np.random.default_rng(2023), N, T, D))]
    seconds = estimate(cases) + time.perf_counter() - start
    print(f"bench_svm: this takes about {seconds:.0f} s on this machine, estimated from one call "
          "of each solver per instance", flush=True)
    missed = [m for label, X, alpha in cases for m in compare(label, X, alpha)]
    print(f"bench_svm: finished in {time.perf_counter() - start:.0f} s")
    if missed:
        print("FAIL: " + "; and ".join(missed) + ".")
        return 1
    print(f"PASS: on both instances the fast solver is at least {SPEEDUP_BAR:g} times as fast as "
          f"cvxpy + Clarabel and agrees with it to {AGREEMENT_BAR:g}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
