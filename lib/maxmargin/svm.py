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

from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import _checks, _infeasibility
from . import _least_distance as _ldp
from ._attsvm import (_att_inputs, _att_problem, _att_rows, _att_svm, _att_system, _data_name,
                      _is_feasible, _set_problem, _set_svm)
from ._forward import DEFAULT_TOL  # noqa: F401  (svm.DEFAULT_TOL, as before)
from ._forward import (FORWARD_TOL, MAX_EXACT, MAX_TOL, _check_values, _exact_dot, _others, _support,
                       _tol)
from ._least_distance import IllConditionedError, least_distance
from ._nuclear import NUCLEAR_TOL, _lift, _Nuclear, _w_infeasible, _w_nuclear
from ._svmresults import (CvxpyProgram, SVMResult, SetSVMResult, VSVMResult, WSVMResult, _margin,
                          _normsvm, _nuclear_norm, _readonly)
from ._svmsolve import (SOLVERS, Program, Solver, _exponent, _multipliers, _run, _solve_checked,
                        _solver, _sum_squares_problem, _variable)
from ._winputs import _w_blame, _w_inputs, _w_problem, _w_rows
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
# Shared helpers
# ----------------------------------------------------------------------------------------------


def _matrix(A, name: str) -> np.ndarray:
    A = _checks.as_float_array(A, name)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"{name}: expected shape (n, d) with n, d >= 1, got {A.shape}")
    return _checks.finite(A, name)


# ----------------------------------------------------------------------------------------------
# ATT-SVM
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Set-SVM: an optimal set of tokens per sequence (nonlinear heads)
# ----------------------------------------------------------------------------------------------


def _set_inputs(X, sets, W):
    K = keyed(X, W).keys
    return K, _checks.token_sets(sets, *K.shape[:2], proper=True)


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


#: The norms of the W-SVM by name, the values of ``w_svm(..., norm=...)`` (a number q >= 1 names
#: the entrywise `l_q` norm too; see :mod:`maxmargin.normsvm`).
W_NORMS = ("frobenius", "nuclear", "spectral", "l1", "linf")


def _w_norm(norm):
    """The validated norm of a W-SVM (a ``normsvm.Norm``)."""
    return _normsvm().parse(norm, "w")


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
