"""The compiled engine's own exponential (lib/maxmargin/_compiled.py), against mpmath.

The kernel's exp (a table of 2^(j/32), a degree-6 polynomial, the power of two assembled from its
bits) is the one piece of the compiled engine that no other computation in the library shares:
the engine-agreement tests in test_train.py see it only through attention weights and slopes.
"""
import mpmath
import numpy as np
import pytest

from maxmargin import _compiled

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
