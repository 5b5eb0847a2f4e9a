"""The solvers of the SVMs of :mod:`maxmargin.svm`: a registry of functions of one least-distance
program (:class:`Program`, re-exported there), the errors of a solve named after the data, and
the solve checked forward (:mod:`._forward`), re-solved once where the rounding of the solution
left constraints short; and the Clarabel solve of the programs certified by their own KKT
conditions (the nuclear-norm W-SVM, :mod:`maxmargin.normsvm`), and the verdict of those
certificates.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from . import _least_distance as _ldp
from ._forward import _Short
from ._least_distance import IllConditionedError
from ._svmresults import CvxpyProgram

if TYPE_CHECKING:
    import cvxpy as cp


@dataclass(frozen=True)
class Program:
    """One max-margin problem, stated once for every solver.

    Attributes
    ----------
    G, h : (m, k) and (m,), the inequality rows G x >= h of the least-distance form.
    readable : builds the textbook cvxpy formulation, (problem, variable), with the same
        solution; its first constraint block holds the rows of G in order (for the multipliers).
    E : (e, k) equality rows E x = 0, or None.
    lift : maps the least-distance solution x to the problem's variable (default: x itself).
    """

    G: np.ndarray
    h: np.ndarray
    readable: Callable[[], tuple]
    E: np.ndarray | None = None
    lift: Callable[[np.ndarray], np.ndarray] | None = None


def _solve_fast(program: Program) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Least-distance solution (and multipliers, without equalities) or None when infeasible."""
    if program.E is None:
        solution = _ldp.solve(program.G, program.h)
        if solution is None:
            return None
        x, mu = solution.p, solution.mu
    else:
        x, mu = _ldp.solve_with_equalities(program.E, program.G, program.h), None
        if x is None:
            return None
    return (x if program.lift is None else program.lift(x)), mu


def _solve_cvxpy(program: Program) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The readable formulation solved by Clarabel; multipliers from its first constraint
    (RuntimeError when Clarabel gives none)."""
    problem, variable = program.readable()
    if not _clarabel(problem):
        return None
    dual = problem.constraints[0].dual_value
    if dual is None:  # not a matter of scale (as a None from the fast solver is): Clarabel failed
        raise RuntimeError(f"cvxpy/Clarabel returns no multipliers (status {problem.status!r})")
    return np.asarray(variable.value, dtype=np.float64), dual / 2  # sum_squares has no 1/2


def _clarabel(problem: cp.Problem) -> bool:
    """Solve with Clarabel; False when infeasible, RuntimeError when the solver fails (callers
    prefix the data argument's name).

    The tolerances are tightened from Clarabel's 1e-8 to 1e-10 (about one more interior-point
    iteration) so that tight constraints read as tight at the default ``tol=1e-8``.
    """
    import cvxpy as cp

    try:
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    except cp.error.SolverError as error:
        raise RuntimeError(f"cvxpy/Clarabel failed ({error}); it works in the data's own units, "
                           "so data far from unit scale can defeat it: rescale the data or use "
                           "solver='fast', which is scale-covariant") from None
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return False
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"cvxpy/Clarabel failed with status {problem.status!r}")
    return True


#: A solver: a function of a :class:`Program` returning (solution, multipliers or None), or None
#: when the problem is infeasible.
Solver = Callable[[Program], "tuple[np.ndarray, np.ndarray | None] | None"]


#: The solvers by name; ``solver="name"`` in every SVM. Adding a solver is adding an entry here.
SOLVERS: dict[str, Solver] = {
    "fast": _solve_fast,
    "cvxpy": _solve_cvxpy,
}


def _run(solve: Solver, program: Program, infeasible: Callable[[], Exception], name: str):
    """(solution, multipliers or None) of ``program``, or the error: ``infeasible()`` when the
    solver finds no point, the same explanation as an :class:`IllConditionedError` when the
    fast solver can only prove that every point lies beyond its resolution, and a ValueError
    naming the data argument ``name`` when the problem is ill-conditioned or out of range."""
    try:
        solved = solve(program)
    except IllConditionedError as error:
        if error.distance is None:
            raise IllConditionedError(f"{name}: {error}") from None
        try:
            explanation = f"; within that resolution, {infeasible()}"
        except IllConditionedError:  # the parts are ill-conditioned too: blame no group
            explanation = ""
        raise IllConditionedError(f"{name}: {error}{explanation}", error.distance) from None
    except _ldp.ScaleError as error:
        raise ValueError(f"{name}: {error}; rescale the data") from None
    except RuntimeError as error:  # cvxpy/Clarabel failed
        raise RuntimeError(f"{name}: {error}") from None
    if solved is None:
        error = infeasible()
        if isinstance(error, RuntimeError):  # cvxpy says infeasible, the fast solver disagrees
            raise RuntimeError(f"{name}: {str(error).split(': ', 1)[-1]}") from None
        raise error
    return solved


def _solve_checked(solve: Solver, program: Program, infeasible: Callable[[], Exception], name: str,
                   seq: np.ndarray, tok: np.ndarray,
                   forward: Callable[[np.ndarray, bool], tuple]):
    """Solve ``program`` (as :func:`_run`) and check the solution forward; returns (solution,
    multipliers or None, what ``forward`` returns, raise: (n, T) or 0.0).

    ``forward(x, refine)`` computes the constraint values of the solution x, checks them with
    :func:`_check_values` and returns them with their scales, (values, scales), each (n, T).
    Row j of ``program.G`` is the constraint (seq[j], tok[j]). When the
    rounding of the solution to float64 leaves a constraint short by more than FORWARD_TOL
    (found in exact arithmetic: sequences of very different scales), the fast solver solves
    once more with the right sides of the constraints that rounding could not decide raised by
    their shortfall plus twice their rounding bound (``raise``, zero elsewhere; where the
    shortfall is rounding, as for the review's instances, the solved problem differs from the
    original by a few times the rounding of its constraint values at the solution), and the
    solution of that problem, certified like every other, is checked against the original
    right sides; the cvxpy solver, or a second shortfall, raises the IllConditionedError."""
    x, mu = _run(solve, program, infeasible, name)
    try:
        return x, mu, forward(x, solve is _solve_fast), 0.0
    except _Short as short:
        raised = short.need
    x, mu = _run(solve, replace(program, h=program.h + raised[seq, tok]), infeasible, name)
    return x, mu, forward(x, False), raised


def _multipliers(mu: np.ndarray | None, name: str) -> np.ndarray:
    if mu is None:
        raise ValueError(f"{name}: the Lagrange multipliers scale like 1 / scale^2 and leave "
                         "the range of float64 at this data scale; rescale the data")
    return mu


def _solver(solver) -> Solver:
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"solver: expected one of {tuple(SOLVERS)}, got {solver!r}")
    return SOLVERS[solver]


def _sum_squares_problem(variable, constraints) -> CvxpyProgram:
    """min ||variable||^2 under ``constraints``, as a cvxpy problem."""
    import cvxpy as cp

    return CvxpyProgram(cp.Problem(cp.Minimize(cp.sum_squares(variable)), constraints), variable)


def _variable(size, name: str) -> cp.Variable:
    import cvxpy as cp

    return cp.Variable(size, name=name)


def _exponent(A: np.ndarray) -> int:
    """e with max |A| / 2^e in [1/2, 1) (0 for a zero array): dividing by 2^e is exact."""
    return int(np.frexp(float(np.abs(A).max(initial=0.0)))[1])


def _clarabel_certified(problem: cp.Problem, name: str, what: str, exists: str,
                        constraint=None) -> None:
    """Solve a feasible program ``what`` (e.g. "nuclear-norm W-SVM") with Clarabel (tolerances
    1e-10) for a caller that certifies the answer by its KKT conditions: IllConditionedError
    naming ``name`` when Clarabel fails, ends with a status other than (inaccurately) optimal,
    or leaves ``constraint`` (if given) without multipliers; ``exists`` says what is known to
    exist ("a feasible W")."""
    import cvxpy as cp

    try:
        with warnings.catch_warnings():
            # cvxpy warns on OPTIMAL_INACCURATE; the answer is certified (KKT) by the caller,
            # which raises when it is not accurate enough, so the warning would only be noise
            warnings.filterwarnings("ignore", message="Solution may be inaccurate",
                                    category=UserWarning)
            problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10,
                          tol_feas=1e-10)
    except cp.error.SolverError as error:
        raise IllConditionedError(f"{name}: cvxpy/Clarabel fails on the {what} ({error})") from None
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) \
            or (constraint is not None and constraint.dual_value is None):
        raise IllConditionedError(f"{name}: cvxpy/Clarabel does not solve the {what} "
                                  f"(status {problem.status!r}), although {exists} exists")


def _kkt_verdict(violations: dict, tol: float, name: str, what: str) -> None:
    """IllConditionedError naming ``name`` and the worst KKT condition of the program ``what``
    (e.g. "nuclear-norm W-SVM") unless every violation (condition -> relative violation) is at
    most ``tol`` (NaN fails)."""
    condition = max(violations, key=lambda k: np.inf if np.isnan(violations[k]) else violations[k])
    if not violations[condition] <= tol:
        raise IllConditionedError(
            f"{name}: the {what} fails its KKT certificate: {condition} violated by "
            f"{violations[condition]:.1e} (relative tolerance {tol:.0e}; the violations: "
            + ", ".join(f"{k} {v:.1e}" for k, v in violations.items()) + ")")
