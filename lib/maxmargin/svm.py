"""The max-margin problems of the paper: ATT-SVM, its set version, the v-SVM and the W-SVM,
and the three SVMs of joint training.

Shapes: ``X`` is (n, T, d), ``alpha`` is (n,) with one selected token per sequence, ``W`` is
(d, d) or ``None`` (the identity). The key of token t is ``k_it = W^T x_it``, so its attention
logit is ``x_it^T W p = k_it^T p``.

Every problem here is a *least-distance program*

    min ||x||   subject to   G x >= h   (and E x = 0 for the set version),

one row per constraint. Each problem states itself once as a :class:`Program` (its rows, and
its readable cvxpy formulation); a solver is a function of such a program, registered by name
in :data:`SOLVERS`. Two are registered and agree to 1e-6 (the tests check it):

* ``solver="fast"`` (default): Lawson and Hanson's reduction of the least-distance program to a
  non-negative least-squares problem, run on a growing working set of constraints and polished
  by an exact equality-constrained solve on its active rows (:func:`least_distance`, in
  :mod:`._least_distance`);
* ``solver="cvxpy"``: the textbook formulation ``Minimize(sum_squares(p))`` subject to
  ``A @ p >= b``, solved by Clarabel (:func:`att_svm_problem` builds it so it can be printed).
  cvxpy is imported on first use.

Infeasible problems raise ``ValueError`` naming the sequence, or a small group of sequences,
that no direction can separate (:mod:`._infeasibility`).

Scale and certificate (fast solver). Every problem is solved in units of its own data, so
X -> c X gives exactly p -> p / c for any c that float64 represents (the Lagrange multipliers,
which scale like 1 / c^2, must be representable too, else ``ValueError`` naming ``X``/``R``).
Every returned solution passes the KKT certificate of :mod:`._least_distance` (primal and dual
feasibility, complementary slackness and stationarity, each to a relative 1e-9); a problem on
which no point passes, or whose feasibility float64 cannot decide, raises
:class:`IllConditionedError` (a ``ValueError``) with the condition estimate. The cvxpy solver is
the independent reference, with Clarabel's own tolerances (1e-10), and is not certified.

Forward check (both solvers). The certificate bounds a backward error, which on sequences of
very different scales still allows a solution that misses the small constraints by far (with
scales 1e-100 and 1, by 1e84). So every SVM then checks its constraint values: each must be at
least its right side minus ``FORWARD_TOL = 1e-6`` after allowing for its own rounding, and a
value that rounding could hide is recomputed in exact rational arithmetic from the float64 data
and solution (at most ``MAX_EXACT`` per call). When that finds a violation, which on sequences
of very different scales (say 1e-6 and 1) the rounding of a correct solution to float64 causes,
the fast solver solves once more with the right sides of the constraints that rounding could
not decide raised by their shortfall plus twice their rounding bound (a change of the problem of a
few times the rounding of its constraint values at the solution) and returns that certified
solution, checked again against the original right sides; a second violation, a violation
under ``solver="cvxpy"``, or more than ``MAX_EXACT`` such values raises
:class:`IllConditionedError` naming the argument. W-SVMs with per-sequence queries whose
constraint matrices (x_{i,alpha_i} - x_it) z_i^T leave float64's normal range are refused up
front (``ValueError`` naming ``X`` or ``queries``).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import _checks, _infeasibility
from . import _least_distance as _ldp
from ._least_distance import IllConditionedError, least_distance
from .problem import keyed

if TYPE_CHECKING:
    import cvxpy as cp

__all__ = [
    "FORWARD_TOL", "MAX_EXACT", "MAX_TOL", "NUCLEAR_TOL", "SOLVERS", "W_NORMS", "IllConditionedError", "Program", "Solver", "JointSVMs",
    "SVMResult", "SetSVMResult", "VSVMResult", "WSVMResult", "att_svm", "att_svm_problem",
    "is_feasible", "joint_svms", "least_distance", "set_svm", "set_svm_problem", "v_svm",
    "v_svm_problem", "w_svm", "w_svm_problem",
]


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


def _margin(norm: float) -> float:
    return float(np.inf) if norm == 0 else 1.0 / norm


def _nuclear_norm(W: np.ndarray) -> float:
    """||W||_* (the sum of the singular values) without overflow: W divided by its largest entry
    first."""
    top = float(np.abs(W).max(initial=0.0))
    if top == 0 or not np.isfinite(top):
        return top
    return top * float(np.linalg.svd(W / top, compute_uv=False).sum())


class _Solution:
    """``norm`` and ``direction`` of a max-margin result, from its solution (the field named by
    ``_solution``: p, v or W), next to its stored ``margin`` = 1 / norm: every SVM result has
    the three under the same names."""

    _solution = "p"

    @property
    def norm(self) -> float:
        """||solution|| (Frobenius for W), computed without overflow."""
        return _ldp.norm(getattr(self, self._solution))

    @property
    def direction(self) -> np.ndarray:
        """The unit direction solution / ||solution||, same shape (zeros when it is 0)."""
        solution = getattr(self, self._solution)
        return solution / self.norm if self.norm > 0 else np.zeros_like(solution)


class CvxpyProgram(NamedTuple):
    """A max-margin problem written out in cvxpy (the ``*_svm_problem`` functions): call
    ``problem.solve(solver=cp.CLARABEL)``, then read ``variable.value``.

    A named tuple, so ``problem, variable = mm.att_svm_problem(...)`` unpacks it.

    Attributes
    ----------
    problem : the ``cvxpy.Problem``, min of the sum of squares of the variable under the
        max-margin constraints.
    variable : the ``cvxpy.Variable`` it solves for (p, v or W).

    Examples
    --------
    >>> import cvxpy as cp
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> program = mm.att_svm_problem(X, [0])
    >>> program.variable.name()
    'p'
    >>> _ = program.problem.solve(solver=cp.CLARABEL)
    >>> np.round(program.variable.value, 4)  # the solution of mm.att_svm(X, [0])
    array([ 0.5, -0.5])
    """

    problem: cp.Problem
    variable: cp.Variable


@dataclass(frozen=True, eq=False)
class SVMResult(_Solution):
    """Solution of ATT-SVM for one selection ``alpha``.

    Attributes
    ----------
    p : (d,) the max-margin direction `p^mm` (not normalised).
    margin : `1 / ||p||` (inf when p = 0, i.e. every sequence is relaxed).
    constraints : (n, T) values `(x_{i,alpha_i} - x_it)^T W p`; inf at the selected token.
    support : (n, T) bool, constraints equal to `b_i` within ``tol``; False at the selected token.
    alpha : (n,) the selected token of each sequence.
    multipliers : (n, T) Lagrange multipliers `mu >= 0` with `p = sum mu_it (k_{i,alpha_i} - k_it)`;
        zero off the support and at the selected token.
    relaxed : (n,) bool, sequences whose constraints are relaxed to >= 0.
    norm_name : the norm p minimizes: "l2" (the default), "l1", "linf" or "l<q>" such as "l1.75"
        (``mm.att_svm(..., norm=...)``; see :mod:`maxmargin.normsvm`).
    dual : (d,) `Lambda = sum_it mu_it (k_{i,alpha_i} - k_it)`, the subgradient of the norm at p
        that certifies optimality (dual norm of `Lambda <= 1`, `<Lambda, p> = ||p||`), or None for l2
        (whose certificate is the least-distance one).
    duality_gap : `||p|| - sum_it mu_it b_i` (``|gap| <= NORM_TOL * ||p||``), or None for l2.
    norm : (property) `||p||` in the SVM's own norm.
    direction : (property) (d,) the unit vector `p / ||p||` in that norm (zeros when p = 0).

    The arrays are read-only.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> res = mm.att_svm(X, [0])  # p = (1/2, -1/2) = mu (x_0 - x_1) with mu = 1/2
    >>> np.round(res.multipliers, 4)
    array([[0. , 0.5]])
    >>> res.constraints  # the one constraint is tight
    array([[inf,  1.]])
    >>> np.round(res.direction, 4), round(res.norm, 4)
    (array([ 0.7071, -0.7071]), 0.7071)
    """

    p: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    alpha: np.ndarray
    multipliers: np.ndarray
    relaxed: np.ndarray
    norm_name: str = "l2"
    dual: np.ndarray | None = None
    duality_gap: float | None = None

    @property
    def norm(self) -> float:
        """`||p||` in the SVM's own norm (l2 by default), computed without overflow."""
        if self.norm_name == "l2":
            return _ldp.norm(self.p)
        return _normsvm().value(self.p, _normsvm().from_name(self.norm_name))


@dataclass(frozen=True, eq=False)
class SetSVMResult(_Solution):
    """Solution of the set version of ATT-SVM (one optimal set of tokens per sequence).

    Attributes
    ----------
    p : (d,) the max-margin direction.
    margin : `1 / ||p||`.
    constraints : (n, T) for `tau` outside the set, min over t in `O_i` of `(x_it - x_itau)^T W p`;
        inf inside the set.
    support : (n, T) bool, constraints equal to 1 within ``tol``.
    sets : (n, T) bool, the optimal sets `O_i`.
    norm : (property) `||p||`.
    direction : (property) (d,) the unit vector `p / ||p||`.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> res = mm.set_svm(X, np.array([[True, True, False]]))
    >>> res.constraints, res.support
    (array([[inf, inf,  1.]]), array([[False, False,  True]]))
    """

    p: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    sets: np.ndarray


@dataclass(frozen=True, eq=False)
class VSVMResult(_Solution):
    """Solution of the v-SVM on the selected tokens.

    Attributes
    ----------
    v : (d,) the max-margin classifier `v^mm`.
    margin : `1 / ||v||`.
    margins : (n,) values `Y_i v^T r_i` (all >= 1).
    support : (n,) bool, margins equal to 1 within ``tol`` (the support set S).
    multipliers : (n,) Lagrange multipliers with `v = sum lambda_i Y_i r_i`; zero off the support.
    norm : (property) `||v||`.
    direction : (property) (d,) the unit vector `v / ||v||`.

    Examples
    --------
    >>> res = mm.v_svm(np.array([[1.0, 1.0], [1.0, -1.0]]), [1.0, -1.0])
    >>> res.support  # both samples on the margin
    array([ True,  True])
    >>> np.round(res.multipliers, 4)  # v = 0.5 (1, 1) - 0.5 (1, -1) = (0, 1)
    array([0.5, 0.5])
    """

    _solution = "v"

    v: np.ndarray
    margin: float
    margins: np.ndarray
    support: np.ndarray
    multipliers: np.ndarray


@dataclass(frozen=True, eq=False)
class WSVMResult(_Solution):
    """Solution of the W-SVM for one selection ``alpha``, in the Frobenius norm (the default),
    the nuclear norm (``mm.w_svm(..., norm="nuclear")``) or another norm of ``W_NORMS`` (spectral,
    entrywise l1, `l_inf`, `l_q`; see :mod:`maxmargin.normsvm`).

    Attributes
    ----------
    W : (d, d) the max-margin key-query matrix `W^mm` (`W^mm_*` for the nuclear norm).
    margin : `1 / ||W||` in the SVM's own norm: `1 / ||W||_F`, or `1 / ||W||_*` for the nuclear norm.
    constraints : (n, T) values `(x_{i,alpha_i} - x_it)^T W z_i`; inf at the selected token.
    support : (n, T) bool, constraints equal to 1 within ``tol``.
    alpha : (n,) the selected token of each sequence.
    norm_name : "frobenius", "nuclear", "spectral", "l1", "linf" or "l<q>" (e.g. "l1.75"), the
        norm that W minimizes (the field is not called ``norm``: that is the number `||W||`, as in
        every SVM result).
    multipliers : (n, T) Lagrange multipliers `mu >= 0` of `min ||W||` (not squared), zero at the
        selected token, or None for the Frobenius norm (whose certificate is the
        least-distance one of ``maxmargin._least_distance``).
    dual : (d, d) `Lambda = sum_it mu_it (x_{i,alpha_i} - x_it) z_i^T`, the subgradient of the
        norm at W that certifies optimality (dual norm of `Lambda <= 1`, `<Lambda, W> = ||W||`; for
        the nuclear norm `||Lambda||_2 <= 1`), or None for the Frobenius norm.
    duality_gap : `||W|| - sum_it mu_it`, in the units of `||W||` (the certificate bounds
        ``|duality_gap| <= NUCLEAR_TOL * ||W||`` (or ``NORM_TOL``)), or None for the Frobenius norm.
    norm : (property) `||W||` in the SVM's own norm (`||W||_F`, `||W||_*` = the sum of the singular
        values, ...), computed without overflow.
    direction : (property) (d, d) the matrix W / norm, of norm 1 in that norm.

    The arrays are read-only.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> res = mm.w_svm(X, [0], queries=[1.0, 0.0])
    >>> res.constraints, res.support
    (array([[inf,  1.]]), array([[False,  True]]))
    >>> round(res.norm, 4)  # = ||p^mm|| of ATT-SVM on the tokens, since ||p|| = 1
    0.7071
    >>> res.norm_name, res.multipliers, res.duality_gap
    ('frobenius', None, None)
    >>> nuc = mm.w_svm(X, [0], queries=[1.0, 0.0], norm="nuclear")  # rank 1: the same W
    >>> nuc.norm_name, round(nuc.norm, 4), np.round(nuc.multipliers, 4)
    ('nuclear', 0.7071, array([[0.    , 0.7071]]))
    """

    _solution = "W"

    W: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    alpha: np.ndarray
    norm_name: str = "frobenius"
    multipliers: np.ndarray | None = None
    dual: np.ndarray | None = None
    duality_gap: float | None = None

    @property
    def norm(self) -> float:
        """`||W||` in the SVM's own norm (Frobenius, nuclear, spectral, entrywise l1, `l_inf`, `l_q`)."""
        if self.norm_name == "nuclear":
            return _nuclear_norm(self.W)
        if self.norm_name == "frobenius":
            return _ldp.norm(self.W)
        return _normsvm().value(self.W, _normsvm().from_name(self.norm_name))


def _normsvm():
    """The module of the other norms (imported on use: it imports this one)."""
    from . import normsvm

    return normsvm


# ----------------------------------------------------------------------------------------------
# Solvers: a registry of functions of one least-distance program
# ----------------------------------------------------------------------------------------------


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
    """The readable formulation solved by Clarabel; multipliers from its first constraint."""
    problem, variable = program.readable()
    if not _clarabel(problem):
        return None
    dual = problem.constraints[0].dual_value
    mu = None if dual is None else dual / 2  # sum_squares has no 1/2
    return np.asarray(variable.value, dtype=np.float64), mu


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


# ----------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------


def _matrix(A, name: str) -> np.ndarray:
    A = _checks.as_float_array(A, name)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"{name}: expected shape (n, d) with n, d >= 1, got {A.shape}")
    return _checks.finite(A, name)


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


def _variable(size, name: str) -> cp.Variable:
    import cvxpy as cp

    return cp.Variable(size, name=name)


# ----------------------------------------------------------------------------------------------
# ATT-SVM
# ----------------------------------------------------------------------------------------------


def _att_inputs(X, alpha, W, relaxed):
    """Validate once: keys (n, T, d), alpha (n,) and the relaxed mask (n,)."""
    K = keyed(X, W).keys
    n, T, _ = K.shape
    alpha = _checks.indices(alpha, n, T)
    relaxed = np.zeros(n, dtype=bool) if relaxed is None else _checks.mask(relaxed, n, "relaxed")
    return K, alpha, relaxed


def _att_system(K: np.ndarray, alpha: np.ndarray, relaxed: np.ndarray):
    """Differences D (n, T, d) and right-hand sides b (n,) of ATT-SVM on validated inputs."""
    return _differences(K, alpha), np.where(relaxed, 0.0, 1.0)


def _att_rows(D: np.ndarray, alpha: np.ndarray, b: np.ndarray):
    """The constraints as G p >= h: one row per (sequence, non-selected token)."""
    others = _others(alpha, D.shape[1])
    seq, tok = np.nonzero(others)
    return D[seq, tok], b[seq], seq, tok


def _att_problem(A: np.ndarray, b_rows: np.ndarray, norm=None) -> CvxpyProgram:
    p = _variable(A.shape[1], "p")
    if norm is not None and norm.name != "l2":
        import cvxpy as cp

        return CvxpyProgram(cp.Problem(cp.Minimize(_normsvm().objective(p, norm)),
                                       [A @ p >= b_rows]), p)
    return _sum_squares_problem(p, [A @ p >= b_rows])


def att_svm_problem(X, alpha, *, W=None, relaxed=None, norm="l2") -> CvxpyProgram:
    """ATT-SVM as a cvxpy problem: `min ||p||^2` s.t. `(x_{i,alpha_i} - x_it)^T W p >= b_i` (for
    another ``norm``, `min ||p||` in that norm, as in :func:`att_svm`).

    Imports cvxpy (about a second on first use). :func:`att_svm` solves the same problem with
    ``solver="cvxpy"``.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    relaxed : keyword-only, (n,) bool, sequences with `b_i = 0` instead of 1 (default None: none).
    norm : keyword-only, "l2" (the default), "l1", "linf" or a number q >= 1, as in
        :func:`att_svm`.

    Returns
    -------
    CvxpyProgram : (problem, variable), the variable p of shape (d,).

    Raises
    ------
    ValueError : X is not (n, T, d) with n, d >= 1 and T >= 2, W is not (d, d), a value is NaN
        or inf, ``alpha`` is not one index in [0, T) per sequence, or ``relaxed`` is not (n,);
        the message names the argument.
    TypeError : X or W is not a real numeric array, ``alpha`` does not hold integers, or
        ``relaxed`` is not a boolean mask.

    Examples
    --------
    >>> import cvxpy as cp
    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> problem, p = mm.att_svm_problem(X, [0])
    >>> _ = problem.solve(solver=cp.CLARABEL)
    >>> np.round(p.value, 4)
    array([ 0.5, -0.5])
    """
    K, alpha, relaxed = _att_inputs(X, alpha, W, relaxed)
    norm = _normsvm().parse(norm, "att")
    D, b = _att_system(K, alpha, relaxed)
    A, b_rows, _, _ = _att_rows(D, alpha, b)
    return _att_problem(A, b_rows, norm)


def att_svm(X, alpha, *, W=None, relaxed=None, solver: str = "fast", tol: float = 1e-8,
            norm="l2") -> SVMResult:
    """Max-margin token selection (ATT-SVM) for the selection ``alpha``.

    Solves `p^mm = argmin ||p||` s.t. `(x_{i,alpha_i} - x_it)^T W p >= b_i` for every sequence i
    and token `t != alpha_i`, with `b_i = 1`, or 0 for the sequences flagged in ``relaxed``.

    ``norm`` (default "l2", the paper's SVM) chooses the norm of p: "l1", "linf" (linear
    programs) or a number q >= 1 for `l_q` (1.75, or 2 for l2, 1 for l1, ``np.inf`` for `l_inf`).
    Every norm but l2 is solved by cvxpy with Clarabel (under either ``solver``) and certified
    by its KKT conditions with the dual norm to ``NORM_TOL = 1e-6`` (see
    :mod:`maxmargin.normsvm`), or refused; for l1 and `l_inf`, whose optima need not be unique,
    p is the least-l2 optimal point. The result's ``margin`` is `1 / ||p||` in that norm.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence (0-based).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    relaxed : keyword-only, (n,) bool mask of relaxed sequences, or None (the default: none).
    solver : keyword-only, "fast" (the default) or "cvxpy" (see
        :data:`~maxmargin.svm.SOLVERS`; l2 only: the other norms always use cvxpy).
    tol : keyword-only, relative tolerance for a constraint to count as tight (support), default
        1e-8: ``abs(value - b_i) <= tol * max(1, |k_{i,alpha_i} - k_it|^T |p|)`` (entrywise
        absolute values: the scale of the value's rounding); below 1/2 (``MAX_TOL``), and small
        enough that tol * max(1, terms) <= 1/2 wherever a constraint is more than 1/2 from `b_i`;
        ``max(tol, NORM_TOL)`` for norms other than l2.
    norm : keyword-only, "l2" (the default), "l1", "linf" or a number `q >= 1` (`l_q`).

    Returns
    -------
    SVMResult : `p^mm`, its margin, the constraint values, support and multipliers (and, for
        norms other than l2, ``norm_name``, the dual vector and the duality gap).

    Raises
    ------
    ValueError : bad inputs (X, W, `alpha` or relaxed of the wrong shape, NaN or inf, an index out
        of [0, T), an unknown ``solver``, ``tol`` not a finite number in (0, 1/2), or a ``tol`` that counts as support a
        constraint more than 1/2 from its right side (the message names ``tol`` and the
        largest that fits the data, 1/2 over max(1, the largest terms))), or no p satisfies
        the constraints (the message names the sequence or a small group of sequences that
        conflict).
    TypeError : X or W is not a real numeric array, ``alpha`` does not hold integers, ``relaxed``
        is not a boolean mask, or ``tol`` is not a number.
    IllConditionedError : (a ValueError) no point passes the KKT certificate to a relative
        1e-9, or every feasible p is longer than 1e10 times the norm that the most demanding
        constraint alone requires (the message gives the estimate), or the solution cannot be
        shown to satisfy every constraint to ``FORWARD_TOL = 1e-6`` (checked in exact
        arithmetic where rounding could hide a violation: sequences whose scales differ by
        about 1e16 or more), or the default tol would call a constraint more than 1/2 from its
        right side tight (terms beyond 1/(2 tol)); see the module docstring of ``maxmargin.svm``.
    RuntimeError : cvxpy/Clarabel fails, or calls a feasible (badly scaled) problem infeasible.

    Examples
    --------
    One sequence of two tokens; ranking token 0 first is `p_1 - p_2 >= 1`, whose shortest solution is
    p = (1/2, -1/2), of margin `1 / ||p|| = sqrt(2)`:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> res = mm.att_svm(X, [0])
    >>> np.round(res.p, 4), round(res.margin, 4)
    (array([ 0.5, -0.5]), 1.4142)
    >>> res.support  # token 1's constraint is tight
    array([[False,  True]])
    """
    K, alpha, relaxed = _att_inputs(X, alpha, W, relaxed)
    norm = _normsvm().parse(norm, "att")
    return _att_svm(K, alpha, relaxed, _solver(solver), _tol(tol),
                    _data_name(W), None if norm.name == "l2" else norm)


def _data_name(W) -> str:
    """The arguments whose scale sets the keys k_it = W^T x_it, for error messages: "X", or
    "X, W" when a key-query matrix is given."""
    return "X" if W is None else "X, W"


def _att_svm(K: np.ndarray, alpha: np.ndarray, relaxed: np.ndarray | None = None, solve=None,
             tol: float = 1e-8, name: str = "X", norm=None) -> SVMResult:
    """ATT-SVM on validated keys K (n, T, d) and alpha (n,); ``relaxed`` (n,) bool or None,
    ``solve`` a solver from :func:`_solver` (default "fast"); errors name ``name``, the data
    the keys come from (:func:`_data_name`); ``norm`` a parsed norm other than l2 (None: l2)."""
    relaxed = np.zeros(len(alpha), dtype=bool) if relaxed is None else relaxed
    solve = _solver("fast") if solve is None else solve
    D, b = _att_system(K, alpha, relaxed)
    n, T, d = D.shape
    G, h, seq, tok = _att_rows(D, alpha, b)

    others = _others(alpha, T)

    def forward(p: np.ndarray, refine: bool) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore"):  # fl(a - b) is within eps |a - b|: D's rounding is in it
            scales = np.abs(D) @ np.abs(p)
        values = _check_values(_values(D, p, others), b[:, None], scales, d + 1, others, name,
                               lambda i, t: _exact_dot(K[i, alpha[i]], p) - _exact_dot(K[i, t], p),
                               refine)
        return values, scales

    mu = np.zeros((n, T))
    if norm is not None:
        return _att_norm(D, alpha, b, G, h, seq, tok, forward, tol, name, norm, relaxed)
    if relaxed.all():  # every right-hand side is 0: p = 0 is optimal (margin inf)
        p = np.zeros(d)
        (values, scales), raised = forward(p, False), 0.0
    else:
        program = Program(G, h, readable=lambda: _att_problem(G, h))
        p, mu_rows, (values, scales), raised = _solve_checked(
            solve, program, lambda: _selection_infeasible(D, alpha, b), name, seq, tok, forward)
        mu[seq, tok] = _multipliers(mu_rows, name)

    norm = _ldp.norm(p)
    support = _support(values, b[:, None] + raised, scales, others, tol, name)
    return SVMResult(
        p=_readonly(p),
        margin=_margin(norm),
        constraints=_readonly(values),
        support=_readonly(support),
        alpha=_readonly(alpha),
        multipliers=_readonly(np.where(support, np.maximum(mu, 0.0), 0.0)),
        relaxed=_readonly(relaxed),
    )


def _att_norm(D, alpha, b, G, h, seq, tok, forward, tol, name, norm, relaxed) -> SVMResult:
    """ATT-SVM in another norm (:mod:`maxmargin.normsvm`): feasibility decided and explained by
    the least-distance solver (it does not depend on the norm), then the certified solve on the
    rows divided by a power of two near their largest entry."""
    normsvm = _normsvm()
    n, T, d = D.shape
    others = _others(alpha, T)
    mu = np.zeros((n, T))
    if relaxed.all():  # every right-hand side is 0: p = 0 is optimal (margin inf)
        p, dual, gap = np.zeros(d), np.zeros(d), 0.0
    else:
        e = _exponent(G)
        unit = np.ldexp(G, -e)
        _run(lambda program: (None if _ldp.solve(program.G, program.h, certify=False) is None
                              else (None, None)),
             Program(unit, h, readable=lambda: None),
             lambda: _selection_infeasible(D, alpha, b), name)
        solved = normsvm.solve(unit, h, (d,), norm, name, -e)
        p, dual, gap = solved.x, solved.dual, solved.gap
        mu[seq, tok] = solved.mu
    values, scales = forward(p, False)
    support = _support(values, b[:, None], scales, others, max(tol, normsvm.NORM_TOL), name,
                       normsvm.NORM_TOL)
    return SVMResult(
        p=_readonly(p),
        margin=_margin(normsvm.value(p, norm)),
        constraints=_readonly(values),
        support=_readonly(support),
        alpha=_readonly(alpha),
        multipliers=_readonly(mu),
        relaxed=_readonly(relaxed),
        norm_name=norm.name,
        dual=_readonly(dual),
        duality_gap=gap,
    )


def is_feasible(X, alpha, *, W=None, relaxed=None) -> bool:
    """Whether ATT-SVM for ``alpha`` has a solution; returns False instead of raising.

    Inputs are validated as in :func:`att_svm` (bad shapes still raise). Feasible means: some p
    satisfies the constraints with `||p||` at most 1e10 L, where `L = max 1 / ||k_{i,alpha_i} - k_it||`
    is the norm that the most demanding constraint alone requires (scale-free: the
    answer does not change with the units of X); a problem whose every solution lies farther
    is reported infeasible (see the module ``maxmargin._least_distance``).

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence (0-based).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    relaxed : keyword-only, (n,) bool mask of sequences with `b_i = 0`, or None (the default: none).

    Returns
    -------
    bool : True when some p ranks every selected token first with margin 1 (0 where relaxed).

    Raises
    ------
    ValueError : X is not (n, T, d) with n, d >= 1 and T >= 2, W is not (d, d), a value is NaN
        or inf, ``alpha`` is not one index in [0, T) per sequence, or ``relaxed`` is not (n,);
        the message names the argument.
    TypeError : X or W is not a real numeric array, ``alpha`` does not hold integers, or
        ``relaxed`` is not a boolean mask.
    IllConditionedError : (a ValueError) the solution fails its KKT certificate.

    Examples
    --------
    >>> X = np.array([[[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]]])
    >>> mm.is_feasible(X, [0]), mm.is_feasible(X, [2])  # token 2 lies between the other two
    (True, False)
    """
    K, alpha, relaxed = _att_inputs(X, alpha, W, relaxed)
    return _is_feasible(K, alpha, relaxed)


def _is_feasible(K: np.ndarray, alpha: np.ndarray, relaxed: np.ndarray | None = None) -> bool:
    """:func:`is_feasible` on validated keys K (n, T, d), alpha (n,), relaxed (n,) or None."""
    relaxed = np.zeros(len(alpha), dtype=bool) if relaxed is None else relaxed
    D, b = _att_system(K, alpha, relaxed)
    G, h, _, _ = _att_rows(D, alpha, b)
    try:
        return _ldp.feasible(G, h)
    except IllConditionedError as error:
        raise IllConditionedError(f"X: {error}") from None
    except _ldp.ScaleError as error:
        raise ValueError(f"X: {error}; rescale the data") from None


def _selection_infeasible(D: np.ndarray, alpha: np.ndarray, b: np.ndarray) -> Exception:
    """Explain why no p has D[i, t] . p >= b_i for every t != alpha_i."""
    others = _others(alpha, D.shape[1])

    def feasible(group: list[int]) -> bool:
        sub = others[group]
        return _ldp.feasible(D[group][sub], np.repeat(b[group], sub.sum(axis=1)))

    return _infeasibility.selection(D, alpha, b, feasible)


# ----------------------------------------------------------------------------------------------
# Set-SVM: an optimal set of tokens per sequence (nonlinear heads)
# ----------------------------------------------------------------------------------------------


def _set_inputs(X, sets, W):
    K = keyed(X, W).keys
    return K, _checks.token_sets(sets, *K.shape[:2], proper=True)


def _set_rows(K: np.ndarray, sets: np.ndarray):
    """Rows of the set problem, relative to the first token t0 of each set O_i.

    Equalities (k_{i,t0} - k_itau)^T p = 0 for tau in O_i, tau != t0, and inequalities
    (k_{i,t0} - k_itau)^T p >= 1 for tau outside O_i (given the equalities, these imply the
    inequalities for every t in O_i). Returns (E, E_seq, E_tok, G, G_seq) with the sequence
    of each row (and the token of each equation).
    The equality rows of sequence i are divided by the power of two nearest its largest key
    entry (exact: the same equations), so that the null space of E, whose singular values are
    cut at a relative 1e-12, keeps the equations of every sequence whatever its scale; a row
    below 1e-12 of its sequence's scale (keys equal up to rounding) is an exact tie and is
    dropped.
    """
    first = np.argmax(sets, axis=1)
    D = _differences(K, first)
    equal = sets & _others(first, K.shape[1])
    E_seq = np.nonzero(equal)[0]
    exponents = np.frexp(np.abs(K).reshape(len(K), -1).max(axis=1))[1]
    E = np.ldexp(D[equal], -exponents[E_seq][:, None])
    real = _ldp.row_norms(E) > 1e-12
    E_tok = np.nonzero(equal)[1]
    return E[real], E_seq[real], E_tok[real], D[~sets], np.nonzero(~sets)[0]


def _set_problem(K: np.ndarray, sets: np.ndarray) -> CvxpyProgram:
    equal_rows, above_rows = [], []
    for keys, inside in zip(K, sets):
        O, rest = np.flatnonzero(inside), np.flatnonzero(~inside)
        equal_rows += [keys[t] - keys[tau] for t in O for tau in O if t < tau]
        above_rows += [keys[t] - keys[tau] for t in O for tau in rest]
    p = _variable(K.shape[2], "p")
    constraints = [np.array(above_rows) @ p >= 1]
    if equal_rows:
        constraints.append(np.array(equal_rows) @ p == 0)
    return _sum_squares_problem(p, constraints)


def set_svm_problem(X, sets, *, W=None) -> CvxpyProgram:
    """Set-SVM as a cvxpy problem, with every pair written out.

    min ||p||^2 s.t. (k_it - k_itau)^T p = 0 for t, tau in O_i and
    (k_it - k_itau)^T p >= 1 for t in O_i, tau not in O_i.

    Parameters
    ----------
    X : (n, T, d) tokens.
    sets : (n, T) bool, the optimal set O_i of each sequence.
    W : (d, d) key-query matrix, or None for the identity.

    Returns
    -------
    CvxpyProgram (problem, variable), the variable p
    """
    return _set_problem(*_set_inputs(X, sets, W))


def set_svm(X, sets, *, W=None, solver: str = "fast", tol: float = 1e-8) -> SetSVMResult:
    """Max-margin selection of a *set* of tokens per sequence.

    Solves `argmin ||p||` s.t. `(x_it - x_itau)^T W p = 0` for t, `tau` in `O_i` and
    `(x_it - x_itau)^T W p >= 1` for t in `O_i`, `tau` not in `O_i`. With one token per set it is
    :func:`att_svm`.

    Parameters
    ----------
    X : (n, T, d) tokens.
    sets : (n, T) bool, the optimal set `O_i` of each sequence (at least one True and one False).
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.
    solver : keyword-only, "fast" (the default) or "cvxpy" (see
        :data:`~maxmargin.svm.SOLVERS`).
    tol : keyword-only, relative tolerance for a constraint to count as tight (as in
        :func:`att_svm`), default 1e-8, below 1/2 and at most 1/2 over max(1, terms).

    Returns
    -------
    SetSVMResult : `p^mm`, its margin, the constraint values and support.

    Raises
    ------
    ValueError : bad inputs (X or W of the wrong shape, NaN or inf, ``sets`` not (n, T), a set
        that is empty or holds every token, an unknown ``solver``, ``tol`` not a finite number in (0, 1/2), or a ``tol`` that counts as support a
        constraint more than 1/2 from its right side (the message names ``tol`` and the
        largest that fits the data, 1/2 over max(1, the largest terms))), or no p
        serves every set.
    TypeError : X or W is not a real numeric array, ``sets`` is not boolean, or ``tol`` is not a
        number.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    Tokens 0 and 1 tie (`(x_0 - x_1)^T p = 0`, so `p_1 = p_2`) and beat token 2 by 1 (`p_1 >= 1`):

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> res = mm.set_svm(X, np.array([[True, True, False]]))
    >>> np.round(res.p, 4), round(res.margin, 4)
    (array([1., 1.]), 0.7071)
    """
    K, sets = _set_inputs(X, sets, W)
    return _set_svm(K, sets, _solver(solver), _tol(tol))


def _set_svm(K: np.ndarray, sets: np.ndarray, solve=None, tol: float = 1e-8) -> SetSVMResult:
    """The set-SVM on validated keys K (n, T, d) and proper sets (n, T)."""
    solve = _solver("fast") if solve is None else solve
    E, E_seq, E_tok, G, G_seq = _set_rows(K, sets)

    first = np.argmax(sets, axis=1)
    inside = np.zeros(sets.shape, dtype=bool)  # the equations kept (not ties up to rounding)
    inside[E_seq, E_tok] = True

    def forward(p: np.ndarray, refine: bool) -> tuple[np.ndarray, np.ndarray]:
        _check_equalities(_differences(K, first), p, inside, "X")
        # values (k_low - k_it)^T p, with k_low the in-set key of the lowest score: differences
        # first, so that near-duplicate keys do not cancel in the scores
        lowest = np.argmin(np.where(sets, K @ p, np.inf), axis=1)
        D = _differences(K, lowest)
        with np.errstate(over="ignore"):
            scales = np.abs(D) @ np.abs(p)
        values = _check_values(np.where(sets, np.inf, D @ p), 1.0, scales, K.shape[2] + 1, ~sets,
                               "X", lambda i, t: _exact_dot(K[i, lowest[i]], p)
                               - _exact_dot(K[i, t], p), refine)
        return values, scales

    program = Program(G, np.ones(len(G)), readable=lambda: _set_problem(K, sets), E=E)
    G_tok = np.nonzero(~sets)[1]  # rows of G: (G_seq, G_tok), the tokens outside the sets
    p, _, (values, scales), raised = _solve_checked(
        solve, program, lambda: _set_infeasible(sets, E, E_seq, G, G_seq), "X", G_seq, G_tok,
        forward)
    norm = _ldp.norm(p)
    return SetSVMResult(
        p=_readonly(p),
        margin=_margin(norm),
        constraints=_readonly(values),
        support=_readonly(_support(values, 1.0 + raised, scales, ~sets, tol, "X")),
        sets=_readonly(sets),
    )


def _set_infeasible(sets, E, E_seq, G, G_seq) -> Exception:
    def feasible(group: list[int]) -> bool:
        rows = np.isin(G_seq, group)
        return _ldp.feasible(G[rows], np.ones(rows.sum()), E[np.isin(E_seq, group)])

    return _infeasibility.token_sets(sets, feasible)


# ----------------------------------------------------------------------------------------------
# v-SVM: the classifier on the selected tokens
# ----------------------------------------------------------------------------------------------


def _v_inputs(R, Y):
    R = _matrix(R, "R")
    return R, _checks.labels(Y, R.shape[0])


def _v_problem(R: np.ndarray, Y: np.ndarray) -> CvxpyProgram:
    import cvxpy as cp

    v = _variable(R.shape[1], "v")
    return _sum_squares_problem(v, [cp.multiply(Y, R @ v) >= 1])


def v_svm_problem(R, Y) -> CvxpyProgram:
    """v-SVM as a cvxpy problem: min ||v||^2 s.t. Y_i v^T r_i >= 1.

    Parameters
    ----------
    R : (n, d) selected tokens r_i.
    Y : (n,) labels in {-1, +1}.

    Returns
    -------
    CvxpyProgram (problem, variable), the variable v
    """
    return _v_problem(*_v_inputs(R, Y))


def v_svm(R, Y, *, solver: str = "fast", tol: float = 1e-8) -> VSVMResult:
    """Max-margin classifier through the origin: `v^mm = argmin ||v||` s.t. `Y_i v^T r_i >= 1`.

    Parameters
    ----------
    R : (n, d) selected tokens `r_i` (e.g. ``X[range(n), alpha]``).
    Y : (n,) labels in {-1, +1}.
    solver : keyword-only, "fast" (the default) or "cvxpy" (see
        :data:`~maxmargin.svm.SOLVERS`).
    tol : keyword-only, relative tolerance for a sample to count as a support vector, default 1e-8:
        ``abs(Y_i v^T r_i - 1) <= tol * max(1, |r_i|^T |v|)``; below 1/2 and at most 1/2 over
        max(1, terms) (as in :func:`att_svm`).

    Returns
    -------
    VSVMResult : `v^mm`, its margin, the margins of the samples, support and multipliers.

    Raises
    ------
    ValueError : bad inputs (R not (n, d) with n, d >= 1, Y not (n,) or a label other than -1 and
        +1, NaN or inf, an unknown ``solver``, ``tol`` not a finite number in (0, 1/2), or a ``tol`` that counts as support a
        constraint more than 1/2 from its right side (the message names ``tol`` and the
        largest that fits the data, 1/2 over max(1, the largest terms))), the samples
        are not separable through the origin, or the multipliers leave float64 at this data
        scale (naming R).
    TypeError : R or Y is not a real numeric array, or ``tol`` is not a number.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    `v_1 + v_2 >= 1` and `v_2 - v_1 >= 1`: the shortest v is (0, 1), of margin 1.

    >>> res = mm.v_svm(np.array([[1.0, 1.0], [1.0, -1.0]]), [1.0, -1.0])
    >>> bool(np.allclose(res.v, [0.0, 1.0])), round(res.margin, 4)
    (True, 1.0)
    """
    R, Y = _v_inputs(R, Y)
    return _v_svm(R, Y, _solver(solver), _tol(tol))


def _v_svm(R: np.ndarray, Y: np.ndarray, solve=None, tol: float = 1e-8) -> VSVMResult:
    """The v-SVM on validated samples R (n, d) and labels Y (n,)."""
    solve = _solver("fast") if solve is None else solve
    G = Y[:, None] * R
    ones = np.ones(len(G))

    rows = np.ones((len(R), 1), dtype=bool)

    def forward(v: np.ndarray, refine: bool) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore"):
            scales = (np.abs(R) @ np.abs(v))[:, None]
        margins = _check_values((G @ v)[:, None], 1.0, scales, R.shape[1], rows, "R",
                                lambda i, t: Fraction(int(Y[i])) * _exact_dot(R[i], v), refine)
        return margins, scales

    program = Program(G, ones, readable=lambda: _v_problem(R, Y))
    index = np.arange(len(R))
    v, mu, (margins, scales), raised = _solve_checked(
        solve, program, lambda: _v_infeasible(G), "R", index, np.zeros_like(index), forward)
    mu = _multipliers(mu, "R")
    support = _support(margins, 1.0 + raised, scales, rows, tol, "R")[:, 0]
    margins = margins[:, 0]
    return VSVMResult(
        v=_readonly(v),
        margin=_margin(_ldp.norm(v)),
        margins=_readonly(margins),
        support=_readonly(support),
        multipliers=_readonly(np.where(support, np.maximum(mu, 0.0), 0.0)),
    )


def _v_infeasible(G: np.ndarray) -> Exception:
    def feasible(group: list[int]) -> bool:
        return _ldp.feasible(G[group], np.ones(len(group)))

    return _infeasibility.classifier(len(G), feasible)


# ----------------------------------------------------------------------------------------------
# W-SVM: the key-query matrix with the smallest Frobenius norm
# ----------------------------------------------------------------------------------------------


def _w_inputs(X, alpha, queries):
    """Validated tokens X (n, T, d), differences D (n, T, d), alpha (n,) and queries Z, (d,) or
    (n, d)."""
    X = _checks.tokens(X)
    n, T, d = X.shape
    alpha = _checks.indices(alpha, n, T)
    queries = _checks.as_float_array(queries, "queries")  # np.ndim fails on a ragged list
    if queries.ndim == 1:
        Z = _checks.vector(queries, d, "queries")
        if not Z.any():
            raise ValueError("queries: the query vector is zero, so x^T W z = 0 for every W")
    else:
        Z = _checks.batched_vector(queries, d, "queries")
        if Z.shape != (n, d):
            raise ValueError(f"queries: expected shape ({d},) or ({n}, {d}), got {Z.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        D = _differences(X, alpha)
    if not np.all(np.isfinite(D)):
        i = int(np.nonzero(~np.isfinite(D).all(axis=(1, 2)))[0][0])
        raise ValueError(f"X: the differences x_{{i,alpha_i}} - x_it of sequence {i} overflow "
                         "float64; rescale X")
    if Z.ndim == 2:
        _w_representable(D, alpha, Z)
    return X, D, alpha, Z


def _w_representable(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray) -> None:
    """Refuse per-sequence queries (n, d) whose constraint matrices (x_{i,alpha_i} - x_it) z_i^T
    leave float64's normal range: their largest entry, max|x_{i,alpha_i} - x_it| max|z_i|,
    overflows (then W or the constraint values at W cannot be represented) or is below the
    smallest normal number 2^-1022 (the entries lose precision, and ||W|| >= 2^1022 / d)."""
    mant_D, exp_D = np.frexp(np.abs(D).max(axis=2))  # (n, T), exact
    mant_Z, exp_Z = np.frexp(np.abs(Z).max(axis=1))  # (n,)
    mant, exp = np.frexp(mant_D * mant_Z[:, None])
    top = exp + exp_D + exp_Z[:, None]  # the largest entry is mant * 2^top, mant in [1/2, 1)
    constraint = _others(alpha, D.shape[1]) & (mant > 0)
    for outside, how in ((constraint & (top > 1024),
                          "overflows float64, so W (about 1 / that entry) or the constraint "
                          "values at W cannot be represented"),
                         (constraint & (top < -1021),
                          "is below float64's smallest normal number 2^-1022, so the constraint "
                          "data lose precision and ||W|| would be at least 1 / (d times that "
                          "entry), at the top of float64's range or beyond")):
        if outside.any():
            i, t = (int(k[0]) for k in np.nonzero(outside))
            size = float(top[i, t] + np.log2(mant[i, t]))
            raise ValueError(
                f"{_w_blame(D, Z)}: the largest entry of the constraint matrix "
                f"(x_{{i,alpha_i}} - x_it) z_i^T of sequence {i}, token {t} (about 2^{size:.1f}) "
                f"{how}; rescale X and queries to comparable sizes")


def _w_rows(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray):
    """Rows of the W-SVM as an LDP in vec(W), row-major:
    (x_{i,alpha_i} - x_it)^T W z_i = <vec((x_{i,alpha_i} - x_it) z_i^T), vec(W)>.

    Returns (G, seq, tok) with G of shape (n (T - 1), d * d).
    """
    Z = np.broadcast_to(Z, (D.shape[0], D.shape[2]))
    others = _others(alpha, D.shape[1])
    seq, tok = np.nonzero(others)
    G = np.einsum("ja,jb->jab", D[seq, tok], Z[seq]).reshape(len(seq), -1)
    return G, seq, tok


#: The norms of the W-SVM by name, the values of ``w_svm(..., norm=...)`` (a number q >= 1 names
#: the entrywise `l_q` norm too; see :mod:`maxmargin.normsvm`).
W_NORMS = ("frobenius", "nuclear", "spectral", "l1", "linf")

#: Relative tolerance of the KKT certificate of the nuclear-norm W-SVM (each of primal
#: feasibility, `mu >= 0`, complementary slackness, `||Lambda||_2 <= 1`, `<Lambda, W> = ||W||_*` and
#: the duality gap, each relative to its own scale). Clarabel's interior point, run to 1e-10,
#: meets it with violations of 1e-13 to 1e-10 on random instances (n, T, d) up to (20, 5, 30),
#: and its Newton polish with about 1e-15: 1e-6 leaves four orders of magnitude for
#: worse-conditioned data, and a certified W is within about 3e-6 of the optimal value (relative)
#: where the constraint values are not the result of heavy cancellation (see ``_nuclear_kkt``).
NUCLEAR_TOL = 1e-6


def _w_norm(norm):
    """The validated norm of a W-SVM (a ``normsvm.Norm``)."""
    return _normsvm().parse(norm, "w")


def _w_problem(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray,
               norm="frobenius") -> CvxpyProgram:
    import cvxpy as cp

    name = getattr(norm, "name", norm)
    n, T, d = D.shape
    seq, tok = np.nonzero(_others(alpha, T))
    differences, queries = D[seq, tok], np.broadcast_to(Z, (n, d))[seq]
    W = _variable((d, d), "W")
    constraints = [cp.sum(cp.multiply(differences @ W, queries), axis=1) >= 1]
    if name == "nuclear":
        return CvxpyProgram(cp.Problem(cp.Minimize(cp.normNuc(W)), constraints), W)
    if name != "frobenius":
        return CvxpyProgram(cp.Problem(cp.Minimize(_normsvm().objective(W, norm)), constraints), W)
    return _sum_squares_problem(W, constraints)


def w_svm_problem(X, alpha, *, queries, norm="frobenius") -> CvxpyProgram:
    """W-SVM as a cvxpy problem: min ||W||_F^2 (or ||W|| in another norm) s.t.
    (x_{i,alpha_i} - x_it)^T W z_i >= 1.

    The nuclear-norm version is a semidefinite program (``cp.normNuc``); Clarabel solves it.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    queries : keyword-only (required), (n, d) one query per sequence, or (d,) one query for all.
    norm : keyword-only, "frobenius" (the default: the objective is sum_squares(W)),
        "nuclear" (normNuc(W)), "spectral" (sigma_max(W)), "l1", "linf" or a number q >= 1
        (the entrywise norms of vec(W)), as in :func:`w_svm`.

    Returns
    -------
    CvxpyProgram (problem, variable) with the variable W (d, d); the first constraint block
    holds one row per (sequence, non-selected token), in row-major order.

    Raises
    ------
    ValueError : bad inputs, as in :func:`w_svm`, or ``norm`` not one of ``W_NORMS`` nor a
        number q >= 1.
    TypeError : X or queries is not a real numeric array, ``alpha`` does not hold integers, or
        ``norm`` is neither a string nor a number.

    Examples
    --------
    >>> import cvxpy as cp
    >>> X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]],
    ...               [[0.0, 1.0], [0.0, 0.0]]])
    >>> program = mm.svm.w_svm_problem(X, [0, 0, 0], queries=np.eye(2)[[0, 1, 1]],
    ...                                norm="nuclear")  # W_11, W_12, W_22 >= 1
    >>> round(float(program.problem.solve(solver=cp.CLARABEL)), 4)  # ||W||_* of W = all ones
    2.0
    """
    X, D, alpha, Z = _w_inputs(X, alpha, queries)
    return _w_problem(D, alpha, Z, _w_norm(norm))


def w_svm(X, alpha, *, queries, norm="frobenius", solver: str = "fast",
          tol: float = 1e-8) -> WSVMResult:
    """Max-margin key-query matrix: `W^mm = argmin ||W||` s.t. `(x_{i,alpha_i} - x_it)^T W z_i >= 1`,
    in the Frobenius norm (the default) or the nuclear norm.

    With one query ``queries = p`` of shape (d,) for every sequence the fast solver uses the closed
    form `W^mm = u^mm p^T / ||p||^2` with `u^mm` the ATT-SVM solution on the raw tokens (W = I):
    the constraints only see u = W p, and the smallest W with W p = u is `u p^T / ||p||^2`. It is
    the nuclear-norm solution too (`||W||_* >= ||W||_2 >= ||W p|| / ||p|| >= ||u^mm|| / ||p||`,
    with equality for this rank-one W only), so ``norm="nuclear"`` returns it as well, certified.

    The nuclear-norm SVM (``norm="nuclear"``), `W^mm_* = argmin ||W||_*` (the sum of the singular
    values), is a semidefinite program, solved by cvxpy with Clarabel under both solvers:
    ``solver="fast"`` solves it for a small core M (`r_D` by `r_Z`), `W = U_D M U_Z^T` with `U_D` an
    orthonormal basis of the differences `x_{i,alpha_i} - x_it` and `U_Z` one of the queries (which
    loses nothing: see the comment in ``_w_nuclear``), ``solver="cvxpy"`` the full-size
    ``maxmargin.svm.w_svm_problem`` (``norm="nuclear"``). Both work on X and the queries
    divided by powers of two near their largest entries (exact; W is scaled back, so X -> c X
    gives W -> W / c at any scale at which W is representable), and every answer passes a KKT
    certificate to
    the relative tolerance ``NUCLEAR_TOL = 1e-6`` (primal feasibility, `mu >= 0`, complementary
    slackness, `||Lambda||_2 <= 1` and `<Lambda, W> = ||W||_*` for
    `Lambda = sum_j mu_j (x_{i,alpha_i} - x_it) z_i^T`, and the duality gap `||W||_* - sum mu_j = 0`), or the call raises
    :class:`IllConditionedError`.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    queries : keyword-only (required), (n, d) the query `z_i` of each sequence (self-attention), or
        (d,) one query p for all.
    norm : keyword-only, "frobenius" (the default: `min ||W||_F`), "nuclear" (`min ||W||_*`),
        "spectral" (`min ||W||_2`, the largest singular value), "l1", "linf" (the largest
        `|entry|`) or a number q >= 1 (entrywise `l_q`; 1, 2 and ``np.inf`` name l1, Frobenius and
        linf). The spectral and entrywise norms are solved by cvxpy with Clarabel under either
        ``solver``, certified to ``NORM_TOL = 1e-6`` with the dual norm (`l_q <-> l_{q/(q-1)}`,
        `l_1 <-> l_inf`, spectral <-> nuclear) or refused; for spectral, l1 and linf, whose optima
        need not be unique, W is the least-Frobenius optimal point (:mod:`maxmargin.normsvm`).
    solver : keyword-only, "fast" (the default) or "cvxpy" (see
        :data:`~maxmargin.svm.SOLVERS`; for the nuclear norm both use cvxpy and Clarabel, on
        the reduced and on the full-size program).
    tol : keyword-only, relative tolerance for a constraint to count as tight, default 1e-8:
        ``abs(value - 1) <= tol * max(1, |x_{i,alpha_i} - x_it|^T |W| |z_i|)``; for the
        nuclear norm ``max(tol, NUCLEAR_TOL)``, the accuracy its certificate guarantees; below
        1/2 and at most 1/2 over max(1, terms) (as in :func:`att_svm`).

    Returns
    -------
    WSVMResult : `W^mm`, its margin `1 / ||W||` in the chosen norm, the constraint values and
        support, ``norm_name``; for the nuclear norm also the multipliers, the dual matrix
        `Lambda` and the duality gap (None for the Frobenius norm).

    Raises
    ------
    ValueError : bad inputs (X not (n, T, d) with n, d >= 1 and T >= 2, ``alpha`` not one index
        in [0, T) per sequence, ``queries`` neither (d,) nor (n, d) or a zero (d,) query, NaN or
        inf, ``norm`` not "frobenius" or "nuclear", an unknown ``solver``, ``tol`` not a finite number in (0, 1/2), or a ``tol`` that counts as support a
        constraint more than 1/2 from its right side (the message names ``tol`` and the
        largest that fits the data, 1/2 over max(1, the largest terms))),
        per-sequence queries whose constraint matrices
        `(x_{i,alpha_i} - x_it) z_i^T` overflow or fall below float64's smallest normal number
        (naming ``X`` or ``queries``, whichever spreads more), or no W ranks every selected
        token first (the same error for both norms: feasibility does not depend on the norm).
    TypeError : X or queries is not a real numeric array, ``alpha`` does not hold integers, or
        ``tol`` is not a number.
    IllConditionedError : (a ValueError) as in :func:`att_svm` (with per-sequence queries whose
        scales spread more than those of the sequences, the message names ``queries``); for
        the nuclear norm also when the answer fails its certificate (the message, starting with
        ``X:``, names the KKT condition and its violation) or Clarabel does not solve the
        program.

    Examples
    --------
    With the query p = (1, 0), `W^mm = u^mm p^T` with `u^mm = (1/2, -1/2)` from ATT-SVM:

    >>> X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> res = mm.w_svm(X, [0], queries=[1.0, 0.0])
    >>> bool(np.allclose(res.W, [[0.5, 0.0], [-0.5, 0.0]])), round(res.margin, 4)
    (True, 1.4142)
    >>> round(mm.w_svm(X, [0], queries=[[0.0, 2.0]]).margin, 4)  # a longer query: a larger margin
    2.8284

    The constraints `W_11 >= 1`, `W_12 >= 1` and `W_22 >= 1`: the Frobenius SVM is [[1, 1], [0, 1]]
    `(||W||_F = sqrt(3), ||W||_* = sqrt(5))`; the nuclear SVM is the rank-one matrix of ones, of
    `||W||_* = 2` (it is optimal: `Lambda = I` has `||Lambda||_2 = 1` and `<I, W> = tr W >= 2` for
    every feasible W):

    >>> X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]],
    ...               [[0.0, 1.0], [0.0, 0.0]]])
    >>> queries = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    >>> fro = mm.w_svm(X, [0, 0, 0], queries=queries)
    >>> np.round(fro.W, 4), round(fro.norm, 4)
    (array([[1., 1.],
           [0., 1.]]), 1.7321)
    >>> nuc = mm.w_svm(X, [0, 0, 0], queries=queries, norm="nuclear")
    >>> np.round(nuc.W, 4), round(nuc.norm, 4), round(nuc.margin, 4)
    (array([[1., 1.],
           [1., 1.]]), 2.0, 0.5)
    >>> abs(nuc.duality_gap) < 1e-6, np.round(nuc.dual, 4)
    (True, array([[1., 0.],
           [0., 1.]]))
    """
    X, D, alpha, Z = _w_inputs(X, alpha, queries)
    norm = _w_norm(norm)
    solve = _solver(solver)
    tol = _tol(tol)
    n, T, d = D.shape
    others = _others(alpha, T)

    each = np.broadcast_to(Z, (n, d))
    name = _w_blame(D, Z)

    def forward(W: np.ndarray, refine: bool) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(over="ignore", invalid="ignore"):
            # (x_{i,alpha_i} - x_it)^T (W z_i): two products of d terms, and the scale of their
            # rounding, sum_ab |x_{i,alpha_i} - x_it|_a |W_ab| |z_i|_b
            values = np.where(others, np.einsum("ita,ia->it", D, each @ W.T), np.inf)
            scales = np.einsum("ita,ia->it", np.abs(D), np.abs(each) @ np.abs(W).T)

        def exact(i, t):  # (x_{i,alpha_i} - x_it)^T W z_i in rationals, from X itself
            Wz = [_exact_dot(row, each[i]) for row in W]
            return sum(((Fraction(float(a)) - Fraction(float(b))) * w
                        for a, b, w in zip(X[i, alpha[i]], X[i, t], Wz)), Fraction(0))

        return _check_values(values, 1.0, scales, 2 * d + 1, others, name, exact, refine), scales

    if norm.name == "frobenius":
        def readable():
            return _w_problem(D, alpha, Z)

        if Z.ndim == 1:  # closed form from u^mm = ATT-SVM on the raw tokens
            program = Program(D[others], np.ones(others.sum()), readable,
                              lift=lambda u: _lift(u, Z))
        else:
            G, _, _ = _w_rows(D, alpha, Z)
            program = Program(G, np.ones(len(G)), readable, lift=lambda x: x.reshape(d, d))
        seq, tok = np.nonzero(others)
        W, _, (values, scales), raised = _solve_checked(
            solve, program, lambda: _w_infeasible(D, alpha, Z), name, seq, tok, forward)
        return WSVMResult(
            W=_readonly(W),
            margin=_margin(_ldp.norm(W)),
            constraints=_readonly(values),
            support=_readonly(_support(values, 1.0 + raised, scales, others, tol, name)),
            alpha=_readonly(alpha),
        )
    if norm.name == "nuclear":
        nuclear, accuracy = _w_nuclear(D, alpha, Z, solver), NUCLEAR_TOL
    else:
        nuclear, accuracy = _w_norm_solve(D, alpha, Z, norm, name), _normsvm().NORM_TOL
    W = nuclear.W
    values, scales = forward(W, False)
    multipliers = np.zeros((n, T))
    multipliers[others] = nuclear.mu
    support = _support(values, 1.0, scales, others, max(tol, accuracy), name, accuracy)
    return WSVMResult(
        W=_readonly(W),
        margin=_margin(_nuclear_norm(W) if norm.name == "nuclear"
                       else _normsvm().value(W, norm)),
        constraints=_readonly(values),
        support=_readonly(support),
        alpha=_readonly(alpha),
        norm_name=norm.name,
        multipliers=_readonly(multipliers),
        dual=_readonly(nuclear.dual),
        duality_gap=nuclear.gap,
    )


def _w_norm_solve(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray, norm, name: str) -> _Nuclear:
    """The W-SVM in the spectral or an entrywise norm (:mod:`maxmargin.normsvm`), certified, on
    D and Z divided by powers of two near their largest entries (exact, as in
    :func:`_w_nuclear`); feasibility decided and explained by the least-distance solver."""
    top_D, top_Z = _exponent(D), _exponent(Z)
    D, Z = np.ldexp(D, -top_D), np.ldexp(Z, -top_Z)
    others = _others(alpha, D.shape[1])
    G, _, _ = _w_rows(D, alpha, Z)
    check = D[others] if Z.ndim == 1 else G  # one query: the constraints see u = W p only
    _run(lambda program: (None if _ldp.solve(program.G, program.h, certify=False) is None
                          else (None, None)),
         Program(check, np.ones(len(check)), readable=lambda: None),
         lambda: _w_infeasible(D, alpha, Z), name)
    solved = _normsvm().solve(G, np.ones(len(G)), (D.shape[2],) * 2, norm, name,
                               -(top_D + top_Z))
    return _Nuclear(solved.x, solved.mu, solved.dual, solved.gap)


def _w_blame(D: np.ndarray, Z: np.ndarray) -> str:
    """The argument to name for a problem that float64 (or Clarabel) cannot resolve: the one
    whose largest per-sequence scale is farther from 1, by over a factor 1000 (the differences
    x_{i,alpha_i} - x_it for X, or the queries); else the one whose per-sequence scales spread
    more by over a factor 2 (mixed scales); else "X"."""
    Z = np.atleast_2d(Z)
    with np.errstate(divide="ignore"):
        tops = [np.log2(np.abs(A).reshape(len(A), -1).max(axis=1)) for A in (D, Z)]
    tops = [top[np.isfinite(top)] for top in tops]
    far = [float(np.abs(top).max()) if top.size else 0.0 for top in tops]
    if abs(far[1] - far[0]) > 10:  # one is over 1000 times farther from unit scale
        return "queries" if far[1] > far[0] else "X"
    spread = [float(np.ptp(top)) if top.size else 0.0 for top in tops]
    return "queries" if spread[1] > spread[0] + 1 else "X"


class _Nuclear(NamedTuple):
    """A certified nuclear-norm W-SVM: W, multipliers mu (one per row, row-major), Lambda and
    the duality gap ||W||_* - sum mu."""

    W: np.ndarray
    mu: np.ndarray
    dual: np.ndarray
    gap: float


def _span(A: np.ndarray) -> np.ndarray:
    """Orthonormal basis (d, r) of the span of the rows of A (m, d), from the SVD of the rows
    scaled to unit length (the span does not change; zero rows are left out); singular values
    below max(m, d) * eps times the largest count as zero, as in ``np.linalg.matrix_rank``."""
    lengths = _ldp.row_norms(A)
    A = A[lengths > 0] / lengths[lengths > 0, None]
    if len(A) == 0:
        return np.zeros((A.shape[1], 0))
    U, S, _ = np.linalg.svd(A.T, full_matrices=False)
    return U[:, : int(np.sum(S > S[0] * max(A.shape) * np.finfo(np.float64).eps))]


def _nuclear_clarabel(problem: cp.Problem, constraint) -> np.ndarray:
    """Solve a nuclear-norm program with Clarabel (tolerances 1e-10); the multipliers of
    ``constraint``. IllConditionedError naming X when Clarabel fails."""
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
        raise IllConditionedError(f"X: cvxpy/Clarabel fails on the nuclear-norm W-SVM "
                                  f"({error})") from None
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or constraint.dual_value is None:
        raise IllConditionedError(f"X: cvxpy/Clarabel does not solve the nuclear-norm W-SVM "
                                  f"(status {problem.status!r}), although a feasible W exists")
    return np.asarray(constraint.dual_value, dtype=np.float64).reshape(-1)


def _nuclear_core(rows_D: np.ndarray, rows_Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reduced nuclear-norm W-SVM: W = U_D M U_Z^T with M (r_D, r_Z) = argmin ||M||_* s.t.
    (U_D^T d_j)^T M (U_Z^T z_j) >= 1. Returns (W, multipliers).

    Why nothing is lost: the constraints see W only through P_D W P_Z (as P_D d_j = d_j and
    P_Z z_j = z_j), and ||P_D W P_Z||_* <= ||W||_* (projectors have spectral norm 1), so some
    optimum is U_D M U_Z^T, of nuclear norm ||M||_* (U_D, U_Z orthonormal); details in
    :func:`_w_nuclear`."""
    import cvxpy as cp

    U_D, U_Z = _span(rows_D), _span(rows_Z)
    a, b = rows_D @ U_D, rows_Z @ U_Z
    M = cp.Variable((U_D.shape[1], U_Z.shape[1]), name="M")
    constraint = cp.sum(cp.multiply(a @ M, b), axis=1) >= 1
    mu = _nuclear_clarabel(cp.Problem(cp.Minimize(cp.normNuc(M)), [constraint]), constraint)
    return U_D @ np.asarray(M.value, dtype=np.float64) @ U_Z.T, mu


def _nuclear_kkt(rows_D: np.ndarray, rows_Z: np.ndarray, W: np.ndarray,
                 mu: np.ndarray) -> dict[str, float]:
    """The KKT violations of (W, mu) for min ||W||_* s.t. <G_j, W> >= 1, G_j = d_j z_j^T (rows
    (m, d) each), each relative to its scale (0 when the condition holds exactly):

    * primal feasibility: max_j of -s_j, s_j = (<G_j, W> - 1) / (|d_j|^T |W| |z_j| + 1) (|.|
      entrywise: the size of the rounding error of the value);
    * dual feasibility: -min_j mu_j / max_j |mu_j|;
    * complementary slackness: sum_j mu_j |s_j| / sum_j mu_j (mu clipped at 0 from here on);
    * spectral norm: ||Lambda||_2 - 1, with Lambda = sum_j mu_j G_j;
    * alignment: | ||W||_* - <Lambda, W> | / ||W||_*;
    * duality gap: | ||W||_* - sum_j mu_j | / ||W||_*.

    The first five are the KKT conditions (Lambda in the subdifferential of ||.||_* at W is
    ||Lambda||_2 <= 1 and <Lambda, W> = ||W||_*); the gap follows from them and is checked
    too. Why they bound the error: every feasible W' has ||W'||_* >= <Lambda, W'> / ||Lambda||_2
    = sum_j mu_j <G_j, W'> / ||Lambda||_2 >= sum_j mu_j / ||Lambda||_2, while W divided by its
    smallest constraint value is feasible; so violations below tol put ||W||_* within about
    3 tol of the optimal value.
    """
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(mu))):
        return dict.fromkeys(("primal feasibility", "dual feasibility", "complementary "
                              "slackness", "spectral norm", "alignment", "duality gap"), np.inf)
    values = np.einsum("ja,ab,jb->j", rows_D, W, rows_Z)
    scale = np.einsum("ja,ab,jb->j", np.abs(rows_D), np.abs(W), np.abs(rows_Z)) + 1.0
    slack = (values - 1.0) / scale
    top = float(np.abs(mu).max(initial=0.0))
    positive = np.maximum(mu, 0.0)
    total = float(positive.sum())
    dual = np.einsum("j,ja,jb->ab", positive, rows_D, rows_Z)
    nuclear = _nuclear_norm(W)
    size = nuclear if nuclear > 0 else np.inf
    return {
        "primal feasibility": max(0.0, -float(slack.min(initial=0.0))),
        "dual feasibility": max(0.0, -float(mu.min(initial=0.0))) / top if top > 0 else np.inf,
        "complementary slackness": float(positive @ np.abs(slack)) / total if total > 0 else np.inf,
        "spectral norm": max(0.0, float(np.linalg.norm(dual, 2)) - 1.0),
        "alignment": abs(nuclear - float(np.sum(dual * W))) / size,
        "duality gap": abs(nuclear - total) / size,
    }


def _nuclear_certify(rows_D: np.ndarray, rows_Z: np.ndarray, W: np.ndarray,
                     mu: np.ndarray) -> None:
    """IllConditionedError naming X and the worst KKT condition unless every violation of
    :func:`_nuclear_kkt` is at most NUCLEAR_TOL."""
    violations = _nuclear_kkt(rows_D, rows_Z, W, mu)
    condition = max(violations, key=violations.get)
    if not violations[condition] <= NUCLEAR_TOL:
        raise IllConditionedError(
            f"X: the nuclear-norm W-SVM fails its KKT certificate: {condition} violated by "
            f"{violations[condition]:.1e} (relative tolerance {NUCLEAR_TOL:.0e}; the violations: "
            + ", ".join(f"{k} {v:.1e}" for k, v in violations.items()) + ")")


def _nuclear_newton(rows_D: np.ndarray, rows_Z: np.ndarray, W: np.ndarray, mu: np.ndarray,
                    rank: int, active: np.ndarray, steps: int = 8):
    """Newton's method on the KKT system of min (||K||_F^2 + ||Q||_F^2) / 2 s.t.
    d_j^T K Q^T z_j = 1 for the ``active`` rows, K and Q of shape (d, rank): the variational
    form of the nuclear norm (||W||_* = min over K Q^T = W of that objective) with the rank of
    the interior-point W fixed. Its KKT system is K = Lambda Q, Q = Lambda^T K and the active
    constraints, with Lambda = sum_j mu_j d_j z_j^T; started from K = U sqrt(S), Q = V sqrt(S)
    of W's SVD it converges quadratically where the interior point stops at about 1e-10 in the
    value and, when a tight constraint has a zero multiplier, only about 1e-5 in W. Steps are
    least-squares solves (the system is invariant under K, Q -> K O, Q O with O orthogonal).
    Returns (W, mu) or None when the iteration does not settle."""
    d = W.shape[0]
    U, S, Vt = np.linalg.svd(W)
    K, Q = U[:, :rank] * np.sqrt(S[:rank]), Vt[:rank].T * np.sqrt(S[:rank])
    a, b, m = rows_D[active], rows_Z[active], len(active)
    y = np.concatenate([K.ravel(), Q.ravel(), mu[active]])
    G = np.einsum("ja,jb->jab", a, b)  # (m, d, d)
    for _ in range(steps):
        K, Q, nu = y[: d * rank].reshape(d, rank), y[d * rank: 2 * d * rank].reshape(d, rank), \
            y[2 * d * rank:]
        Lam = np.einsum("j,jab->ab", nu, G)
        F = np.concatenate([(K - Lam @ Q).ravel(), (Q - Lam.T @ K).ravel(),
                            np.einsum("ja,ak,bk,jb->j", a, K, Q, b) - 1.0])
        # Jacobian, row-major vec: d vec(A Q) / d vec(Q) = kron(A, I_rank)
        J = np.zeros((len(F), len(y)))
        r1, r2 = slice(0, d * rank), slice(d * rank, 2 * d * rank)
        J[r1, r1] = np.eye(d * rank)
        J[r1, r2] = -np.kron(Lam, np.eye(rank))
        J[r1, 2 * d * rank:] = -np.einsum("jab,bk->akj", G, Q).reshape(d * rank, m)
        J[r2, r2] = np.eye(d * rank)
        J[r2, r1] = -np.kron(Lam.T, np.eye(rank))
        J[r2, 2 * d * rank:] = -np.einsum("jab,ak->bkj", G, K).reshape(d * rank, m)
        J[2 * d * rank:, r1] = np.einsum("ja,jk->jak", a, b @ Q).reshape(m, d * rank)
        J[2 * d * rank:, r2] = np.einsum("jb,jk->jbk", b, a @ K).reshape(m, d * rank)
        if not (np.all(np.isfinite(J)) and np.all(np.isfinite(F))):
            return None
        try:
            step = np.linalg.lstsq(J, -F, rcond=None)[0]
        except np.linalg.LinAlgError:  # LAPACK's SVD failed: a diverging iteration
            return None
        y = y + step
        if not np.all(np.isfinite(y)):
            return None
        if np.linalg.norm(step) <= 1e-15 * np.linalg.norm(y):
            break
    K, Q = y[: d * rank].reshape(d, rank), y[d * rank: 2 * d * rank].reshape(d, rank)
    full = np.zeros(len(mu))
    full[active] = y[2 * d * rank:]
    return K @ Q.T, full


#: Largest Newton system (unknowns 2 d rank + active rows) that :func:`_nuclear_polish` solves:
#: a dense least-squares solve of that size takes about 0.1 s; beyond it the interior-point
#: answer is certified as it is (its violations are about 1e-10, see ``NUCLEAR_TOL``).
POLISH_SIZE = 1500


def _nuclear_polish(rows_D: np.ndarray, rows_Z: np.ndarray, W: np.ndarray,
                    mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best of the interior-point (W, mu) and its Newton refinements
    (:func:`_nuclear_newton`) with the rank and the active rows read off at a few thresholds:
    the pair with the smallest largest violation of :func:`_nuclear_kkt`."""
    def worst(pair):
        return max(_nuclear_kkt(rows_D, rows_Z, *pair).values())

    best = (W, mu)
    best_violation = worst(best)
    S = np.linalg.svd(W, compute_uv=False)
    slack = np.einsum("ja,ab,jb->j", rows_D, W, rows_Z) - 1.0
    top = float(np.abs(mu).max(initial=0.0))
    for cut in (1e-9, 1e-7, 1e-5):
        rank = int(np.sum(S > cut * S[0]))
        active = np.flatnonzero((mu > cut * top) | (np.abs(slack) < cut))
        if rank == 0 or len(active) == 0 or 2 * W.shape[0] * rank + len(active) > POLISH_SIZE:
            continue
        polished = _nuclear_newton(rows_D, rows_Z, W, mu, rank, active)
        if polished is not None:
            violation = worst(polished)
            if violation < best_violation:
                best, best_violation = polished, violation
        if best_violation <= 1e-14:  # rounding level: no later cut can do better
            break
    return best


def _w_nuclear(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray, solver: str) -> _Nuclear:
    """The nuclear-norm W-SVM on validated differences D (n, T, d) and queries Z, certified.

    Feasibility does not depend on the norm, so it is decided (and explained) by the
    least-distance solver exactly as for the Frobenius norm. Everything runs on D and Z divided
    by powers of two 2^e_D, 2^e_Z near their largest entries (exact divisions, so the
    certificate at unit scale is the certificate of the data; W and mu, which scale like
    1 / (scale of D * scale of Z), are multiplied back by 2^-(e_D + e_Z), a ValueError naming X
    when that leaves float64), and the program is solved:

    * solver "fast" with one shared query p: the closed form u^mm p^T / ||p||^2 (the Frobenius
      solution; see :func:`w_svm` for why it is the nuclear one too), with multipliers
      mu_u / (||u|| ||p||) from those of ATT-SVM, mu_u (u = sum_j mu_u,j d_j), so that
      Lambda = u p^T / (||u|| ||p||), ||Lambda||_2 = 1 and sum mu = ||u|| / ||p|| = ||W||_*;
    * solver "fast" otherwise: the core M below; solver "cvxpy": the full-size
      ``w_svm_problem`` (``norm="nuclear"``) on the rescaled data.

    Reduction (why the core M loses nothing). Constraint j is <W, G_j> >= 1 with
    G_j = d_j z_j^T, d_j = x_{i,alpha_i} - x_it and z_j = z_i. Let P_D and P_Z be the
    orthogonal projectors onto span{d_j} and span{z_j}. Since P_D d_j = d_j and P_Z z_j = z_j,
    <P_D W P_Z, G_j> = d_j^T P_D W P_Z z_j = d_j^T W z_j = <W, G_j>: the constraints see W only
    through P_D W P_Z, which is feasible whenever W is. And ||P_D W P_Z||_* <= ||P_D||_2
    ||W||_* ||P_Z||_2 <= ||W||_* (Hoelder's inequality for Schatten norms). So projecting an
    optimum gives an optimum W = U_D M U_Z^T, with U_D (d, r_D) and U_Z (d, r_Z) orthonormal
    bases of the two spans and M = U_D^T W U_Z; as U_D and U_Z have orthonormal columns,
    ||W||_* = ||M||_*, and the constraints read (U_D^T d_j)^T M (U_Z^T z_j) >= 1. Hence
    min ||M||_* under those constraints is the nuclear-norm W-SVM, with r_D <= min(d, n (T - 1))
    and r_Z <= min(d, n). (The certificate below checks the lifted W on the original rows, so
    a wrong basis cannot pass.)
    """
    # unit scale by powers of two (exact): D = 2^e_D D_u, Z = 2^e_Z Z_u, so W = W_u / 2^(e_D + e_Z)
    # and mu = mu_u / 2^(e_D + e_Z), the certificate of (W_u, mu_u) on (D_u, Z_u) being exactly
    # the one of (W, mu) on (D, Z); everything below runs on D_u, Z_u
    e_D, e_Z = _exponent(D), _exponent(Z)
    D, Z = np.ldexp(D, -e_D), np.ldexp(Z, -e_Z)
    n, T, d = D.shape
    others = _others(alpha, T)
    each = np.broadcast_to(Z, (n, d))
    rows_D, rows_Z = D[others], each[np.nonzero(others)[0]]

    # feasibility, norm-independent: the least-distance test and the Frobenius explanation (on
    # the unit-scale data: the products d_j z_j^T of the rows of G neither under- nor overflow)
    if Z.ndim == 1:
        check = Program(rows_D, np.ones(len(rows_D)), readable=lambda: None)
    else:
        check = Program(_w_rows(D, alpha, Z)[0], np.ones(len(rows_D)), readable=lambda: None)
    _run(lambda program: (None if _ldp.solve(program.G, program.h, certify=False) is None
                          else (None, None)),
         check, lambda: _w_infeasible(D, alpha, Z), "X")

    if Z.ndim == 1 and solver == "fast":
        u, mu_u = _run(_solve_fast, Program(rows_D, np.ones(len(rows_D)), readable=lambda: None),
                       lambda: _w_infeasible(D, alpha, Z), "X")
        W = _lift(u, Z)
        mu = _multipliers(mu_u, "X") / (_ldp.norm(u) * _ldp.norm(Z))
    else:
        if solver == "cvxpy":
            problem, variable = _w_problem(D, alpha, each, "nuclear")
            mu = _nuclear_clarabel(problem, problem.constraints[0])
            W = np.asarray(variable.value, dtype=np.float64)
        else:
            W, mu = _nuclear_core(rows_D, rows_Z)
        W, mu = _nuclear_polish(rows_D, rows_Z, W, mu)
    _nuclear_certify(rows_D, rows_Z, W, mu)
    mu = np.maximum(mu, 0.0)
    dual = np.einsum("j,ja,jb->ab", mu, rows_D, rows_Z)  # scale-free: the same at any scale
    gap = _nuclear_norm(W) - float(mu.sum())
    # back to the data's scale; W and mu scale alike, by 2^-(e_D + e_Z)
    shift = -(e_D + e_Z)
    top = float(np.abs(W).max())
    with np.errstate(over="ignore", under="ignore"):
        largest = np.ldexp(max(top, float(mu.max(initial=0.0))), shift)
    if not (np.isfinite(largest) and np.ldexp(top, shift) >= np.finfo(np.float64).tiny):
        raise ValueError(f"X: the nuclear-norm W^mm scales like 1 / (scale of X * scale of "
                         f"queries) and its entries (about 2^{np.frexp(top)[1] + shift}) leave "
                         "the range of float64 at these scales; rescale X or queries")
    return _Nuclear(np.ldexp(W, shift), np.ldexp(mu, shift), dual, float(np.ldexp(gap, shift)))


def _exponent(A: np.ndarray) -> int:
    """e with max |A| / 2^e in [1/2, 1) (0 for a zero array): dividing by 2^e is exact."""
    return int(np.frexp(float(np.abs(A).max(initial=0.0)))[1])


def _lift(u: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The smallest W (d, d) with W p = u: u p^T / ||p||^2, computed with p divided by its
    largest entry first, so that ||p||^2 neither under- nor overflows (W scales like 1 / p)."""
    top = float(np.abs(p).max())
    unit = p / top
    with np.errstate(over="ignore", under="ignore"):
        W = np.outer(u, unit) / (unit @ unit) / top
    largest = float(np.abs(W).max())
    tiny = np.finfo(np.float64).tiny
    if not np.isfinite(largest) or (0 < np.abs(u).max() and largest < tiny):
        exponent = _exponent(u) - _exponent(p)
        raise _ldp.ScaleError(f"W^mm = u p^T / ||p||^2 scales like 1 / (scale of X * scale of "
                              f"queries) and its entries (about 2^{exponent}) leave the range of "
                              "float64 at these scales")
    return W


def _w_infeasible(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray) -> Exception:
    if Z.ndim == 1:  # one query p: the constraints see u = W p only, so the rows are D's own
        seq, tok = np.nonzero(_others(alpha, D.shape[1]))
        G = D[seq, tok]
    else:
        G, seq, _ = _w_rows(D, alpha, Z)

    def feasible(group: list[int]) -> bool:
        rows = np.isin(seq, group)
        return _ldp.feasible(G[rows], np.ones(rows.sum()))

    queries = np.broadcast_to(Z, (D.shape[0], D.shape[2]))
    return _infeasibility.key_query(D, alpha, queries, feasible)


# ----------------------------------------------------------------------------------------------
# The SVMs of joint training
# ----------------------------------------------------------------------------------------------


class JointSVMs(NamedTuple):
    """The three max-margin problems of joint training (see :func:`joint_svms`).

    A named tuple ``(v, relaxed, full)``.

    Attributes
    ----------
    v : VSVMResult, `v^mm` on the selected tokens; its ``support`` is the set S.
    relaxed : SVMResult, `p^relax`: the sequences outside S only need margin >= 0.
    full : SVMResult, the ordinary ATT-SVM of the selection.

    Examples
    --------
    >>> inst = mm.data.fig3(variant="tight")  # every sequence is a support vector of the v-SVM
    >>> svms = mm.joint_svms(inst.X, inst.Y, [1, 1, 1])
    >>> svms.v.support, bool(np.allclose(svms.relaxed.p, svms.full.p))  # S is every sequence
    (array([ True,  True,  True]), True)
    """

    v: VSVMResult        # v^mm on the selected tokens, .support is the set S
    relaxed: SVMResult   # p^relax, sequences outside S only need margin >= 0
    full: SVMResult      # the ordinary ATT-SVM of the selection


def joint_svms(X, Y, alpha, *, W=None) -> JointSVMs:
    """v-SVM on the selected tokens `r_i = x_{i,alpha_i}`, the relaxed p-SVM and the full ATT-SVM.

    The relaxed p-SVM relaxes (margin >= 0) exactly the sequences that are not support vectors of
    the v-SVM. All three are solved by the fast solver with the default ``tol``.

    Parameters
    ----------
    X : (n, T, d) tokens.
    Y : (n,) labels in {-1, +1}.
    alpha : (n,) selected token of each sequence.
    W : keyword-only, (d, d) key-query matrix, or None (the default) for the identity.

    Returns
    -------
    JointSVMs : (v, relaxed, full).

    Raises
    ------
    ValueError : bad inputs (shapes, labels other than -1 and +1, NaN or inf, an index out of
        [0, T)), the selected tokens are not separable through the origin, or an ATT-SVM is
        infeasible.
    TypeError : X, Y or W is not a real numeric array, or ``alpha`` does not hold integers.
    IllConditionedError : (a ValueError) as in :func:`att_svm`.

    Examples
    --------
    In Fig. 3's relaxed panel the third sequence is off the v-SVM margin, so its ATT-SVM
    constraint is relaxed and `p^relax = (1, 0)`; the full ATT-SVM solves `p_1 - p_2 = 1`,
    `0.5 p_1 + 1.5 p_2 = 1`:

    >>> inst = mm.data.fig3(variant="relaxed")
    >>> svms = mm.joint_svms(inst.X, inst.Y, [1, 1, 1])
    >>> svms.v.support
    array([ True,  True, False])
    >>> bool(np.allclose(svms.relaxed.p, [1.0, 0.0])), np.round(svms.full.p, 4)
    (True, array([1.25, 0.25]))
    """
    prob = keyed(X, W)
    n, T, _ = prob.shape
    alpha = _checks.indices(alpha, n, T)
    vsvm = _v_svm(prob.X[np.arange(n), alpha], _checks.labels(Y, n))
    name = _data_name(prob.W)
    return JointSVMs(vsvm, _att_svm(prob.keys, alpha, relaxed=~vsvm.support, name=name),
                     _att_svm(prob.keys, alpha, name=name))
