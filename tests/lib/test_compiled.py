"""The compiled engine's own exponential (lib/maxmargin/_compiled.py), against mpmath.

The kernel's exp (a table of 2^(j/32), a degree-6 polynomial, the power of two assembled from its
bits) is the one piece of the compiled engine that no other computation in the library shares:
the engine-agreement tests in test_train.py see it only through attention weights and slopes.
"""
import mpmath
import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin import _blocks, _compiled, _engines, train

TINY = mpmath.mpf(2) ** -1022     # the smallest normal float64


def ulp_errors(x: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|got - exp(x)| in units in the last place of exp(x) (below 2^-1022: of the subnormals,
    2^-1074), exp(x) exact to 40 digits."""
    errors = np.empty(len(x))
    with mpmath.workdps(40):
        for i, (xi, yi) in enumerate(zip(x, got)):
            exact = mpmath.exp(mpmath.mpf(float(xi)))
            unit = (mpmath.mpf(2) ** -1074 if exact < TINY
                    else mpmath.mpf(2) ** (mpmath.floor(mpmath.log(exact, 2)) - 52))
            errors[i] = float(abs(mpmath.mpf(float(yi)) - exact) / unit)
    return errors


def kernel_exp(x: np.ndarray) -> np.ndarray:
    y = np.array(x, dtype=float)
    _compiled._exp_lanes(y, len(y))
    return y


def test_exp_is_within_about_one_ulp_over_the_float64_range():
    """The whole finite range of exp, the softmax's range [-40, 0], |x| < 1e-3 and the subnormal
    results [-745.1, -708.4]: at most 1.1 ulp (rounding the table entry and the result, 1/2 ulp
    each, plus the polynomial's 4e-18; measured 0.98).

    Bugs caught: a wrong table entry (one ulp off is 1.5 ulp at its x), the low part of ln 2 / 32
    dropped from the reduction (error growing with |x|, 1e3 ulp at 700), a polynomial coefficient
    off, the power of two assembled as one factor (subnormal results wrong), k // 32 taken as
    k >> 4."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-745.1, 709.7, 6000), rng.uniform(-40.0, 0.0, 3000),
                        rng.uniform(-1e-3, 1e-3, 500), rng.uniform(-745.1, -708.4, 1500),
                        np.arange(-31, 33) * np.log(2.0) / 32])   # every table entry, r near 0
    errors = ulp_errors(x, kernel_exp(x))
    assert errors.max() <= 1.1, (x[np.argmax(errors)], errors.max())


@pytest.mark.parametrize("x, expected", [
    (0.0, 1.0), (-0.0, 1.0), (np.inf, np.inf), (-np.inf, 0.0), (1e300, np.inf), (-1e300, 0.0),
    (709.78, 1.7928227943945155e308),     # the largest finite results
    (709.79, np.inf),
    (-745.13, 5e-324),                    # the smallest subnormal
    (-745.14, 0.0),
])
def test_exp_at_the_ends_of_the_range(x, expected):
    """Overflow to inf and underflow to 0 where exp does (the clamps at 710 and -1100), exp(0) = 1
    exactly; values as numpy's exp (correctly rounded there)."""
    with np.errstate(over="ignore"):
        assert kernel_exp([x])[0] == expected == np.exp(x)


def test_exp_of_nan_is_nan():
    """A NaN logit stays NaN (a clamp written as max(x, -1100) in the wrong order returns -1100,
    and exp would then hide the NaN as 0)."""
    assert np.isnan(kernel_exp([np.nan])[0])


@pytest.mark.parametrize("threads, B, M, expected", [
    (1, 1, 1, 8), (1, 8, 1, 8),        # a wider block would compute spare lanes for nothing
    (1, 64, 1, 32), (1, 1024, 1, 32),  # every lane used: the widest block is the cheapest
    (1, 33, 1, 16),                    # 32 lanes would compute 64 lane-steps for 33 starts
    (2, 32, 1, 16), (2, 16, 1, 8),     # one block would leave the second thread idle
    (2, 16, 2, 16),                    # two instances: two blocks already
])
def test_block_lanes_use_every_thread_and_waste_few_lanes(threads, B, M, expected):
    """The compiled GD kernel's block size (_blocks._block_lanes with the measured costs). Bugs
    caught: a block size that leaves a thread idle (B = 32 on two threads in one 32-lane block),
    the widest block taken whatever the waste (33 starts in two blocks of 32), or the narrowest
    (1024 starts in blocks of 8)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert _blocks._block_lanes(B, M, _engines._GD_LANE_COSTS) == expected
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("starts", [8, 16, 32, 40])
def test_every_block_size_gives_the_same_iterates(starts, monkeypatch):
    """The blocks of 8, 16 and 32 starts compute each lane alike (the same sums in the same
    order), so a run's iterates do not depend on the block size the engine chooses: bit for bit,
    over 30 steps at an odd T and d (the two-row sums of 16 lanes end with a single row). Bug
    caught: a lane of one build reading another lane's prompt or keys, a remainder row dropped."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", "compiled")
    inst = mm.data.random_instance(5, 7, 3, seed=8)
    P0 = np.random.default_rng(3).standard_normal((starts, 3))
    runs = []
    for costs in ({8: 1.0}, {16: 1.0}, {32: 1.0}):
        monkeypatch.setattr(_engines, "_GD_LANE_COSTS", costs)
        runs.append(mm.gd(inst.X, inst.Y, inst.v, P0, 30, 0.5, W=inst.W, normalized=True,
                          record_every=None))
    for run in runs[1:]:
        np.testing.assert_array_equal(run.p, runs[0].p)
        np.testing.assert_array_equal(run.risk, runs[0].risk)
        np.testing.assert_array_equal(run.final_attention, runs[0].final_attention)
