"""ATT-SVM and the Set-SVM on validated keys (:func:`~maxmargin.att_svm`,
:func:`~maxmargin.is_feasible`, :func:`~maxmargin.set_svm` validate and call these; so do
:mod:`maxmargin.optimality`, :mod:`maxmargin.traps` and :mod:`maxmargin.heads`), with the
explanation of an infeasible selection.
"""
from __future__ import annotations

import numpy as np

from . import _checks, _infeasibility
from . import _least_distance as _ldp
from ._forward import (_check_equalities, _check_values, _differences, _exact_dot, _others,
                       _support, _values)
from ._least_distance import IllConditionedError
from ._svmresults import CvxpyProgram, SVMResult, SetSVMResult, _margin, _normsvm, _readonly
from ._svmsolve import (Program, _exponent, _multipliers, _run, _solve_checked, _solver,
                        _sum_squares_problem, _variable)
from .problem import keyed


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
