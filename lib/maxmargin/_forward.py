"""The forward check of every SVM (:mod:`maxmargin.svm`): the constraint values of a solution, each
proved to reach its right side minus ``FORWARD_TOL`` after allowing for its own rounding (values
that rounding could hide recomputed in exact rational arithmetic), the equalities of the
set version, and the support constraints read from those values within ``tol``.
"""
from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from . import _checks
from ._least_distance import IllConditionedError


def _differences(K: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """D[i, t] = k_{i,alpha_i} - k_it, shape (n, T, d) (zero at the selected token)."""
    return K[np.arange(len(alpha)), alpha][:, None, :] - K


def _others(alpha: np.ndarray, T: int) -> np.ndarray:
    """(n, T) bool, True at every token except the selected one."""
    return np.arange(T)[None, :] != alpha[:, None]


def _values(D: np.ndarray, x: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Constraint values D[i, t] . x, with inf where there is no constraint (and where they
    overflow: :func:`_check_values` refuses those)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(others, D @ x, np.inf)


#: Every returned solution satisfies each of its constraints, value >= right side - FORWARD_TOL
#: (right sides 1, or 0 for relaxed sequences), after allowing for the rounding of the value
#: itself; else the call raises IllConditionedError. The KKT certificate bounds the backward
#: error (rows perturbed by a relative 1e-9), which allows a constraint value off by 1e-9
#: times the sum of the absolute terms of that constraint: for data whose sequences differ in
#: scale by 1e100 that sum is 1e100 on the large-scale side, and the rounded solution missed
#: such constraints by 1e84 (a cancellation that float64 cannot undo).
FORWARD_TOL = 1e-6


class _Short(Exception):
    """Raised by :func:`_check_values` (with ``refine=True``) when the rounding of a solution left
    constraints short: ``need`` (n, T) is how much to raise each right side (zero elsewhere), and
    ``error`` the IllConditionedError to raise if no re-solve is possible."""

    def __init__(self, need: np.ndarray, error: IllConditionedError):
        super().__init__(str(error))
        self.need, self.error = need, error


def _check_values(values: np.ndarray, target, scales: np.ndarray, terms: int,
                  others: np.ndarray, name: str, exact: Callable[[int, int], Fraction],
                  refine: bool = False) -> np.ndarray:
    """The constraint values, each proved to satisfy value >= target - FORWARD_TOL; else
    IllConditionedError naming ``name`` (or, with ``refine``, :class:`_Short` when exact
    arithmetic found a violation: :func:`_solve_checked` then re-solves once).

    values (n, T): the computed constraint values; target: their right sides (a scalar, (n, 1)
    or (n, T)); scales (n, T): the sums of the absolute values of the terms of each value, whose
    rounding error is at most (terms + 2) eps times that; others (n, T): the constraints.
    A value that this bound cannot decide is evaluated exactly by ``exact(i, t)`` (rational
    arithmetic on the float64 data and solution) and returned rounded (at most MAX_EXACT of
    them; beyond, the call refuses)."""
    eps = np.finfo(np.float64).eps
    target = np.broadcast_to(target, values.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        error = (terms + 2) * eps * scales
        short = others & ~(values - error >= target - FORWARD_TOL)  # NaN and inf fail too
    if not short.any():
        return values
    rows = np.argwhere(short)
    if not np.all(np.isfinite(values[short]) & np.isfinite(scales[short])):
        i, t = rows[~(np.isfinite(values[short]) & np.isfinite(scales[short]))][0]
        raise IllConditionedError(
            f"{name}: the constraint values of sequence {i} (token {t}) at the solution, or the "
            "sums of their terms, exceed float64: the scales of the sequences differ by too "
            "large a factor for one solution; rescale them to comparable sizes")
    if len(rows) > MAX_EXACT:
        i, t = rows[0]
        raise IllConditionedError(
            f"{name}: the constraint of sequence {i}, token {t} is a sum of terms of absolute "
            f"size up to {float(scales[i, t]):.1e} at the solution, so float64 knows its value "
            f"({float(values[i, t]):.3g}) only to {float(error[i, t]):.1e}, and {len(rows)} "
            "such values would need exact arithmetic: the scales of the sequences differ by too "
            "large a factor for one solution; rescale them to comparable sizes")
    values = values.copy()
    violation = None
    for i, t in rows:
        value = exact(int(i), int(t))
        if violation is None and value < Fraction(float(target[i, t])) - Fraction(FORWARD_TOL):
            violation = IllConditionedError(
                f"{name}: the solution violates the constraint of sequence {i}, token {t} by "
                f"{float(Fraction(float(target[i, t])) - value):.1e} (exactly; above FORWARD_TOL "
                f"= {FORWARD_TOL:g}): its terms reach {float(scales[i, t]):.1e}, so the scales "
                "of the sequences differ by too large a factor for float64; rescale them to "
                "comparable sizes")
        values[i, t] = float(value)
    if violation is None:
        return values
    if not refine:
        raise violation
    # every undecided constraint: its exact shortfall (if any) plus twice its rounding bound
    need = np.zeros(values.shape)
    need[short] = np.maximum(target[short] - values[short], 0.0) + 2 * error[short]
    raise _Short(need, violation)


def _check_equalities(D: np.ndarray, p: np.ndarray, equal: np.ndarray, name: str) -> None:
    """Refuse (IllConditionedError naming ``name``) a solution whose equalities D[i, t] . p = 0
    (``equal`` (n, T) marks them) miss by more than FORWARD_TOL plus twice their rounding bound
    (d + 2) eps sum |D[i, t]| |p|: a float64 p cannot make a sum of terms of size S vanish to
    better than about eps S, so that is the accuracy an equality can have, and a larger miss
    means the solver lost the equation (equalities of a small-scale sequence cut from the null
    space as rounding)."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.abs(D @ p)
        error = (D.shape[2] + 2) * np.finfo(np.float64).eps * (np.abs(D) @ np.abs(p))
        missed = equal & ~(values <= FORWARD_TOL + 2 * error)  # NaN and inf miss too
    if missed.any():
        i, t = (int(k[0]) for k in np.nonzero(missed))
        raise IllConditionedError(
            f"{name}: the solution gives token {t} of sequence {i} a score "
            f"{float(values[i, t]):.1e} away from the other tokens of its set, beyond its "
            f"rounding ({float(error[i, t]):.1e}) and FORWARD_TOL: the scales of the sequences "
            "differ by too large a factor for float64; rescale them to comparable sizes")


#: At most this many constraint values per call are evaluated exactly (see _check_values).
MAX_EXACT = 2000


def _exact_dot(a: np.ndarray, b: np.ndarray) -> Fraction:
    """a . b of float64 vectors, exactly."""
    return sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b) if x and y),
               Fraction(0))


#: Tolerances ``tol`` of the SVMs lie in (0, MAX_TOL): a constraint counts as support only
#: within 1/2 of its right side, and at tol >= 1/2 even one whose terms are of size 1 would
#: count at 1/2 or more from it.
MAX_TOL = 0.5


#: The SVMs' default ``tol``.
DEFAULT_TOL = 1e-8


def _tol(tol) -> float:
    """A support tolerance ``tol``: a finite number in (0, MAX_TOL), else a ValueError naming it."""
    tol = _checks.positive_float(tol, "tol")
    if tol >= MAX_TOL:
        raise ValueError(f"tol: must be below {MAX_TOL:g} (a constraint counts as support only "
                         f"within 1/2 of its right side, relative to max(1, its terms)), got {tol!r}")
    return tol


def _support(values: np.ndarray, target, scales: np.ndarray, others: np.ndarray, tol: float,
             name: str, default: float = DEFAULT_TOL) -> np.ndarray:
    """others & |value - target| <= tol * max(1, scale): the tight constraints, refusing when that
    tolerance admits a value more than 1/2 away from its right side. The message names ``tol``
    when the solver's own tolerance ``default`` would not have admitted it (tol is too large for
    terms of this size: it gives the bound tol must stay below for these data), else ``name`` (the terms
    exceed 1 / (2 default), and float64 cannot tell a support constraint from a slack one)."""
    target = np.broadcast_to(target, values.shape)
    gap = np.where(others, np.abs(values - target), 0.0)
    tight = others & (gap <= tol * np.maximum(1.0, scales))
    room = np.maximum(1.0, scales)
    unclear = tight & (gap > 0.5)
    if unclear.any():
        blame_tol = unclear & (gap > default * room)
        i, t = (int(k[0]) for k in np.nonzero(blame_tol if blame_tol.any() else unclear))
        if blame_tol.any():
            # the largest tol admitting none of them: below every such gap / max(1, terms)
            limit = float(np.min((gap / room)[others & (gap > 0.5)]))
            raise ValueError(
                f"tol: tol = {tol!r} counts as support the constraint of sequence {i}, token {t}, "
                f"whose value {float(values[i, t]):.3g} is more than 1/2 from its right side (its "
                f"terms reach {float(scales[i, t]):.2g}, and the tolerance is tol * max(1, terms)); "
                f"for these data tol must be below {limit!r} (the least |value - right side| / "
                f"max(1, terms) of the constraints more than 1/2 from their right side)")
        raise IllConditionedError(
            f"{name}: the constraint of sequence {i}, token {t} has the value "
            f"{float(values[i, t]):.3g}, but its terms reach {float(scales[i, t]):.1e}, so at "
            f"the relative tolerance tol = {tol:g} it cannot be told from a support constraint: "
            "the scales of the sequences differ by too large a factor; rescale them to "
            "comparable sizes")
    return tight
