"""The Clarabel solve of the programs certified by their own KKT conditions, shared by the
nuclear-norm W-SVM (``mm.w_svm(..., norm="nuclear")``) and the SVMs in other norms
(``mm.att_svm(..., norm="l1")``, :mod:`maxmargin.normsvm`): what it asks of Clarabel and how it
fails. Clarabel is replaced by fakes around ``cvxpy.Problem.solve`` (the real solve, then a
status, a warning or missing multipliers imposed), so each failure is reached on purpose.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import maxmargin as mm

cp = pytest.importorskip("cvxpy")

RNG = np.random.default_rng(38)
X = RNG.standard_normal((3, 4, 5))
Z = RNG.standard_normal((3, 5))   # one query per sequence: the core program, solved by Clarabel
ALPHA = [0, 0, 0]
REAL_SOLVE = cp.Problem.solve


def nuclear():
    return mm.w_svm(X, ALPHA, queries=Z, norm="nuclear")


def l1():
    return mm.att_svm(X, ALPHA, norm="l1")


CALLS = {"nuclear": (nuclear, "nuclear-norm W-SVM", "a feasible W"),
         "l1": (l1, "l1 SVM", "a feasible point")}


@pytest.mark.parametrize("which", CALLS)
def test_clarabel_is_asked_for_1e_10(which, monkeypatch):
    """Bug caught: a solve at Clarabel's default tolerances (1e-8), or by another solver, which
    the KKT certificate at 1e-9 then refuses on harder data."""
    asked = []

    def spy(self, *args, **kwargs):
        asked.append(kwargs)
        return REAL_SOLVE(self, *args, **kwargs)

    monkeypatch.setattr(cp.Problem, "solve", spy)
    CALLS[which][0]()
    assert asked and all(k == dict(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10,
                                   tol_feas=1e-10) for k in asked), asked


@pytest.mark.parametrize("which", CALLS)
def test_a_solver_error_names_X_and_the_program(which, monkeypatch):
    """Bug caught: cvxpy's SolverError escaping, or an error that does not name the data."""
    def failing(self, *args, **kwargs):
        raise cp.error.SolverError("no convergence")

    monkeypatch.setattr(cp.Problem, "solve", failing)
    call, what, _ = CALLS[which]
    with pytest.raises(mm.IllConditionedError,
                       match=rf"^X: cvxpy/Clarabel fails on the {what} \(no convergence\)$"):
        call()


@pytest.mark.parametrize("status", ["infeasible", "unbounded", "solver_error"])
@pytest.mark.parametrize("which", CALLS)
def test_a_status_other_than_optimal_is_refused(which, status, monkeypatch):
    """Bug caught: an infeasible or failed status read as a solution (its values are stale or
    None), instead of the error that says a feasible point exists."""
    def ending(self, *args, **kwargs):
        REAL_SOLVE(self, *args, **kwargs)
        self._status = status

    monkeypatch.setattr(cp.Problem, "solve", ending)
    call, what, exists = CALLS[which]
    with pytest.raises(mm.IllConditionedError,
                       match=rf"^X: cvxpy/Clarabel does not solve the {what} \(status "
                             rf"'{status}'\), although {exists} exists$"):
        call()


def test_missing_multipliers_of_the_nuclear_program_are_refused(solves_without_multipliers):
    """Bug caught: an optimal status without multipliers passed on (np.asarray(None) is an
    object array: the certificate would fail with a TypeError, not the solver's error)."""
    with pytest.raises(mm.IllConditionedError,
                       match=r"^X: cvxpy/Clarabel does not solve the nuclear-norm W-SVM "
                             r"\(status 'optimal'\), although a feasible W exists$"):
        nuclear()


@pytest.mark.parametrize("which", CALLS)
def test_an_inaccurate_optimum_is_certified_without_a_warning(which, monkeypatch):
    """OPTIMAL_INACCURATE is accepted and certified by the caller, and cvxpy's warning about it
    is not shown (the certificate decides). The fake reports the accurate optimum as inaccurate,
    with cvxpy's warning: the result equals the real one. Bugs caught: that status refused, or
    the warning let through."""
    expected = CALLS[which][0]()

    def inaccurate(self, *args, **kwargs):
        REAL_SOLVE(self, *args, **kwargs)
        self._status = cp.OPTIMAL_INACCURATE
        warnings.warn("Solution may be inaccurate. Try another solver, adjusting the solver "
                      "settings, or solve with verbose=True for more information.", UserWarning)

    monkeypatch.setattr(cp.Problem, "solve", inaccurate)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CALLS[which][0]()
    assert not [w for w in caught if "inaccurate" in str(w.message)]
    field = "W" if which == "nuclear" else "p"
    np.testing.assert_array_equal(getattr(result, field), getattr(expected, field))
