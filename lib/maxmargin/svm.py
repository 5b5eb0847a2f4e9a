"""The max-margin problems of the paper: ATT-SVM, its set version, the v-SVM and the W-SVM.

Shapes: ``X`` is (n, T, d), ``alpha`` is (n,) with one selected token per sequence, ``W`` is
(d, d) or ``None`` (the identity). The key of token t is ``k_it = W^T x_it``, so its attention
logit is ``x_it^T W p = k_it^T p``.

Every problem here is a *least-distance program*

    min ||p||   subject to   G p >= h,

one row per constraint. Two solvers are offered and agree to 1e-6 (the tests check it):

* ``solver="fast"`` (default): Lawson and Hanson's reduction of the least-distance program to a
  non-negative least-squares problem, run on a growing working set of constraints and polished
  by an exact equality-constrained solve on its active rows (:func:`least_distance`);
* ``solver="cvxpy"``: the textbook formulation ``Minimize(sum_squares(p))`` subject to
  ``A @ p >= b``, solved by Clarabel (:func:`att_svm_problem` builds it so it can be printed).

Infeasible problems raise ``ValueError`` naming the sequence, or a small group of sequences,
that no direction can separate.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
from scipy.optimize import nnls

from . import _checks

SOLVERS = ("fast", "cvxpy")


# ----------------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------------


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.array(a)
    a.setflags(write=False)
    return a


def _margin(norm: float) -> float:
    return float(np.inf) if norm == 0 else 1.0 / norm


class _PromptSolution:
    """``norm`` and ``direction`` of a result whose solution is the prompt ``p``."""

    p: np.ndarray

    @property
    def norm(self) -> float:
        """||p||."""
        return float(np.linalg.norm(self.p))

    @property
    def direction(self) -> np.ndarray:
        """The unit direction p / ||p||, shape (d,) (zeros when p = 0)."""
        return self.p / self.norm if self.norm > 0 else np.zeros_like(self.p)


@dataclass(frozen=True, eq=False)
class SVMResult(_PromptSolution):
    """Solution of ATT-SVM for one selection ``alpha``.

    Attributes
    ----------
    p : (d,) the max-margin direction p^mm (not normalised).
    margin : 1 / ||p|| (inf when p = 0, i.e. every sequence is relaxed).
    constraints : (n, T) values (x_{i,alpha_i} - x_it)^T W p; inf at the selected token.
    support : (n, T) bool, constraints equal to b_i within ``tol``; False at the selected token.
    alpha : (n,) the selected token of each sequence.
    multipliers : (n, T) Lagrange multipliers mu >= 0 with p = sum mu_it (k_{i,alpha_i} - k_it);
        zero off the support and at the selected token.
    relaxed : (n,) bool, sequences whose constraints are relaxed to >= 0.
    """

    p: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    alpha: np.ndarray
    multipliers: np.ndarray
    relaxed: np.ndarray


@dataclass(frozen=True, eq=False)
class SetSVMResult(_PromptSolution):
    """Solution of the set version of ATT-SVM (one optimal set of tokens per sequence).

    Attributes
    ----------
    p : (d,) the max-margin direction.
    margin : 1 / ||p||.
    constraints : (n, T) for tau outside the set, min over t in O_i of (x_it - x_itau)^T W p;
        inf inside the set.
    support : (n, T) bool, constraints equal to 1 within ``tol``.
    sets : (n, T) bool, the optimal sets O_i.
    """

    p: np.ndarray
    margin: float
    constraints: np.ndarray
    support: np.ndarray
    sets: np.ndarray


@dataclass(frozen=True, eq=False)
class VSVMResult:
    """Solution of the v-SVM on the selected tokens.

    Attributes
    ----------
    v : (d,) the max-margin classifier v^mm.
    margin : 1 / ||v||.
    margins : (n,) values Y_i v^T r_i (all >= 1).
    support : (n,) bool, margins equal to 1 within ``tol`` (the support set S).
    multipliers : (n,) Lagrange multipliers with v = sum lambda_i Y_i r_i; zero off the support.
    """

    v: np.ndarray
    margin: float
    margins: np.ndarray
    support: np.ndarray
    multipliers: np.ndarray

    @property
    def norm(self) -> float:
        """||v||."""
        return float(np.linalg.norm(self.v))


@dataclass(frozen=True, eq=False)
class WSVMResult:
    """Solution of the W-SVM (Frobenius norm) for one selection ``alpha``.

    Attributes
    ----------
    W : (d, d) the max-margin key-query matrix W^mm.
    norm : ||W||_F.
    constraints : (n, T) values (x_{i,alpha_i} - x_it)^T W z_i; inf at the selected token.
    support : (n, T) bool, constraints equal to 1 within ``tol``.
    alpha : (n,) the selected token of each sequence.
    """

    W: np.ndarray
    norm: float
    constraints: np.ndarray
    support: np.ndarray
    alpha: np.ndarray

    @property
    def margin(self) -> float:
        """1 / ||W||_F."""
        return _margin(self.norm)


# ----------------------------------------------------------------------------------------------
# The least-distance solver
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LDPSolution:
    p: np.ndarray  # (d,) the minimum-norm feasible point
    mu: np.ndarray  # (m,) multipliers >= 0 of min ||p||^2 / 2, with p = G^T mu


def least_distance(G, h, tol: float = 1e-10) -> np.ndarray | None:
    """Minimum-norm point of the polyhedron {p : G p >= h}.

    Parameters
    ----------
    G : (m, d) constraint rows.
    h : (m,) right-hand sides.
    tol : feasibility tolerance; a polyhedron whose nearest point has norm above 1 / tol is
        reported as empty.

    Returns
    -------
    (d,) the solution, or ``None`` when the polyhedron is empty.
    """
    G = _checks.finite(_checks._as_float_array(G, "G"), "G")
    if G.ndim != 2:
        raise ValueError(f"G: expected shape (m, d), got an array with shape {G.shape}")
    h = _checks.vector(h, G.shape[0], "h")
    tol = _checks.positive_float(tol, "tol")
    solution = _solve_ldp(G, h, tol)
    return None if solution is None else solution.p


def _nnls_ldp(E: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Lawson and Hanson's LDP algorithm on E = [G^T; h^T] of shape (d + 1, m).

    With f = e_{d+1}, let u = argmin_{u >= 0} ||E u - f|| and r = E u - f. Then r = 0 certifies
    that {G p >= h} is empty (G^T u = 0 with h^T u = 1, Farkas), and otherwise
    p = -r[:d] / r[d] is the least-distance point, with ||r||^2 = 1 / (1 + ||p||^2).
    Returns (p, u), or None when empty.
    """
    d = E.shape[0] - 1
    f = np.zeros(d + 1)
    f[d] = 1.0
    u, rnorm = nnls(E, f, maxiter=50 * (d + 1) + 3 * E.shape[1])
    if rnorm <= tol:
        return None
    r = E @ u - f
    return -r[:d] / r[d], u


def _equality_ldp(G_A: np.ndarray, h_A: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Candidates (p, mu) for min ||p|| s.t. G_A p = h_A, with p = G_A^T mu.

    First from the normal equations (G_A G_A^T) mu = h_A; then, for dependent rows, the
    minimum-norm least-squares p with mu >= 0 fitted by NNLS. The caller checks the KKT
    conditions and takes the first candidate that passes.
    """
    with suppress(np.linalg.LinAlgError):
        mu = np.linalg.solve(G_A @ G_A.T, h_A)
        yield G_A.T @ mu, mu
    p = np.linalg.lstsq(G_A, h_A, rcond=None)[0]
    yield p, nnls(G_A.T, p)[0]


def _solve_ldp(G: np.ndarray, h: np.ndarray, tol: float = 1e-10) -> _LDPSolution | None:
    """The fast solver behind :func:`least_distance`, also returning the multipliers.

    1. Scale every row (g_j, h_j) to unit length (the polyhedron does not change).
    2. Working set: solve the LDP on a few rows (those whose half-spaces come closest to the
       origin), add the most violated remaining rows, and repeat until no row is violated. The
       solution on a subset of the rows is a lower bound, so once it satisfies every row it is
       optimal; an empty subset proves the whole polyhedron empty.
    3. Polish: on the active rows (u > 0) solve the equality-constrained problem exactly and keep
       that point if it passes the KKT certificate (G_A p = h_A, G p >= h, p = G_A^T mu with
       mu >= 0, which together prove optimality); otherwise keep the Lawson-Hanson point, which
       is already accurate to rounding.
    """
    m, d = G.shape
    if not np.any(h > 0):  # p = 0 is feasible, hence optimal
        return _LDPSolution(np.zeros(d), np.zeros(m))
    scale = np.sqrt(np.einsum("ij,ij->i", G, G) + h * h)
    rows = np.flatnonzero(scale > 0)  # all-zero rows read 0 >= 0 and never bind
    E = np.vstack([G[rows].T, h[rows]]) / scale[rows]  # (d + 1, m) with unit columns
    Gn, hn = E[:d].T, E[d]

    # 2. working set, seeded with the half-spaces nearest to the origin (largest hn)
    size = min(len(rows), 2 * (d + 1))
    work = np.zeros(len(rows), dtype=bool)
    work[np.argpartition(-hn, size - 1)[:size]] = True
    while True:
        solved = _nnls_ldp(E[:, work], tol)
        if solved is None:
            return None
        p, u_work = solved
        slack = Gn @ p - hn
        violated = np.flatnonzero((slack < -tol * max(1.0, np.linalg.norm(p))) & ~work)
        if len(violated) == 0:
            break
        if len(violated) > work.sum():  # at most double the working set, worst rows first
            violated = violated[np.argpartition(slack[violated], work.sum())[: work.sum()]]
        work[violated] = True
    u = np.zeros(len(rows))
    u[work] = u_work
    mu = u / (1.0 - hn @ u)  # from p = G^T u / (-r[d]) and r[d] = h^T u - 1

    # 3. polish on the active rows
    active = np.flatnonzero(u > 0)
    G_A, h_A = Gn[active], hn[active]
    for p_exact, mu_A in _equality_ldp(G_A, h_A):
        bound = tol * max(1.0, np.linalg.norm(p_exact))
        if (
            np.all(mu_A >= 0)
            and np.all(np.abs(G_A @ p_exact - h_A) <= bound)
            and np.all(np.abs(G_A.T @ mu_A - p_exact) <= bound)
            and np.all(Gn @ p_exact - hn >= -bound)
        ):
            p = p_exact
            mu = np.zeros(len(rows))
            mu[active] = mu_A
            break

    mu_full = np.zeros(m)
    mu_full[rows] = mu / scale[rows]  # undo the row scaling: G^T mu_full = Gn^T mu
    return _LDPSolution(p, mu_full)


def _conflicting_group(count: int, feasible: Callable[[list[int]], bool]) -> list[int]:
    """A small infeasible group: add members in order until infeasible, then drop the unneeded."""
    group: list[int] = []
    for i in range(count):
        group.append(i)
        if not feasible(group):
            break
    else:
        return []
    for j in group[:-1]:
        smaller = [k for k in group if k != j]
        if not feasible(smaller):
            group = smaller
    return group


# ----------------------------------------------------------------------------------------------
# Validation and shared helpers
# ----------------------------------------------------------------------------------------------


def _solver(solver) -> str:
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"solver: expected one of {SOLVERS}, got {solver!r}")
    return solver


def _matrix(A, name: str) -> np.ndarray:
    A = _checks._as_float_array(A, name)
    if A.ndim != 2 or A.shape[0] < 1 or A.shape[1] < 1:
        raise ValueError(f"{name}: expected shape (n, d) with n, d >= 1, got {A.shape}")
    return _checks.finite(A, name)


def _keys(X: np.ndarray, W: np.ndarray | None) -> np.ndarray:
    """Keys k_it = W^T x_it, shape (n, T, d)."""
    return X if W is None else X @ W


def _differences(K: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """D[i, t] = k_{i,alpha_i} - k_it, shape (n, T, d) (zero at the selected token)."""
    return K[np.arange(len(alpha)), alpha][:, None, :] - K


def _others(alpha: np.ndarray, T: int) -> np.ndarray:
    """(n, T) bool, True at every token except the selected one."""
    return np.arange(T)[None, :] != alpha[:, None]


def _values(D: np.ndarray, x: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Constraint values D[i, t] . x, with inf where there is no constraint."""
    return np.where(others, D @ x, np.inf)


def _tight(values: np.ndarray, target, sizes: np.ndarray, norm: float, tol: float) -> np.ndarray:
    """Constraints g^T p equal to their right-hand side up to rounding:
    |g^T p - target| <= tol * max(1, ||g|| ||p||), since ||g|| ||p|| is the scale of g^T p."""
    return np.abs(values - target) <= tol * np.maximum(1.0, sizes * norm)


def _solve_cvxpy(problem: cp.Problem) -> bool:
    """Solve with Clarabel; False when infeasible, RuntimeError when the solver fails.

    The tolerances are tightened from Clarabel's 1e-8 to 1e-10 (about one more interior-point
    iteration) so that tight constraints read as tight at the default ``tol=1e-8``.
    """
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return False
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"cvxpy/Clarabel failed with status {problem.status!r}")
    return True


def _same_key(D: np.ndarray, i: int, alpha: np.ndarray) -> int | None:
    """A token of sequence i whose key equals the selected one's (zero difference), if any."""
    size = np.linalg.norm(D[i], axis=1)
    tie = (size <= 1e-12 * max(1.0, size.max())) & (np.arange(D.shape[1]) != alpha[i])
    return int(np.argmax(tie)) if tie.any() else None


def _explain_infeasible(
    prefix: str,
    n: int,
    feasible: Callable[[list[int]], bool],
    alone: Callable[[int], str | None],
    jointly: Callable[[list[int]], str],
) -> Exception:
    """The error for an infeasible problem: first a member infeasible on its own, if any
    (``alone(i)`` explains it or returns None), else a small group that conflicts.

    Only when the fast solver finds the whole problem feasible after all (cvxpy/Clarabel can
    declare badly scaled problems infeasible) is the error a RuntimeError instead.
    """
    for i in range(n):
        reason = alone(i)
        if reason is not None:
            return ValueError(f"{prefix} {reason}")
    group = _conflicting_group(n, feasible)
    if not group:
        return RuntimeError(
            f"{prefix.split(':')[0]}: cvxpy/Clarabel reports the problem infeasible, but the fast "
            "solver finds a feasible point (badly scaled data?); use solver='fast'"
        )
    return ValueError(f"{prefix} {jointly(group)}")


def _unrankable(D: np.ndarray, i: int, alpha: np.ndarray, by: str) -> str:
    """Why sequence i alone is infeasible: a duplicate of the selected key, or the convex hull."""
    twin = _same_key(D, i, alpha)
    why = (
        f"token {twin} has the same key, a duplicate of the selected token"
        if twin is not None
        else "its key lies in the convex hull of the others"
    )
    return f"in sequence {i} token {alpha[i]} cannot be ranked above all other tokens by any {by} ({why})"


def _not_jointly(group: list[int], by: str, note: str = "") -> str:
    return (
        f"every sequence can be separated on its own, but sequences {group}{note} "
        f"cannot be separated by one common {by}"
    )


def _selection_infeasible(D: np.ndarray, alpha: np.ndarray, b: np.ndarray) -> Exception:
    """Explain why no p has D[i, t] . p >= b_i for every t != alpha_i."""
    others = _others(alpha, D.shape[1])

    def feasible(group: list[int]) -> bool:
        sub = others[group]
        return _solve_ldp(D[group][sub], np.repeat(b[group], sub.sum(axis=1))) is not None

    def alone(i: int) -> str | None:
        if b[i] == 0 or feasible([i]):
            return None
        return _unrankable(D, i, alpha, "p")

    def jointly(group: list[int]) -> str:
        relaxed = [i for i in group if b[i] == 0]
        return _not_jointly(group, "p", f" (relaxed among them: {relaxed})" if relaxed else "")

    prefix = "alpha: ATT-SVM is infeasible:"
    return _explain_infeasible(prefix, len(alpha), feasible, alone, jointly)


# ----------------------------------------------------------------------------------------------
# ATT-SVM
# ----------------------------------------------------------------------------------------------


def _att_inputs(X, alpha, W, relaxed):
    X = _checks.tokens(X)
    n, T, d = X.shape
    alpha = _checks.indices(alpha, n, T)
    W = _checks.key_matrix(W, d)
    relaxed = np.zeros(n, dtype=bool) if relaxed is None else _checks.mask(relaxed, n, "relaxed")
    D = _differences(_keys(X, W), alpha)
    b = np.where(relaxed, 0.0, 1.0)
    return D, alpha, b, relaxed


def _att_rows(D: np.ndarray, alpha: np.ndarray, b: np.ndarray):
    """The constraints as G p >= h: one row per (sequence, non-selected token)."""
    others = _others(alpha, D.shape[1])
    seq, tok = np.nonzero(others)
    return D[seq, tok], b[seq], seq, tok


def att_svm_problem(X, alpha, W=None, relaxed=None) -> tuple[cp.Problem, cp.Variable]:
    """ATT-SVM as a cvxpy problem: min ||p||^2 s.t. (x_{i,alpha_i} - x_it)^T W p >= b_i.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    W : (d, d) key-query matrix, or None for the identity.
    relaxed : (n,) bool, sequences with b_i = 0 instead of 1 (default: none).

    Returns
    -------
    (problem, p): the problem, to ``problem.solve(solver=cp.CLARABEL)``, and its variable p (d,).
    """
    D, alpha, b, _ = _att_inputs(X, alpha, W, relaxed)
    A, b_rows, _, _ = _att_rows(D, alpha, b)
    p = cp.Variable(D.shape[2], name="p")
    problem = cp.Problem(cp.Minimize(cp.sum_squares(p)), [A @ p >= b_rows])
    return problem, p


def att_svm(X, alpha, W=None, relaxed=None, solver: str = "fast", tol: float = 1e-8) -> SVMResult:
    """Max-margin token selection (ATT-SVM) for the selection ``alpha``.

    Solves p^mm = argmin ||p|| s.t. (x_{i,alpha_i} - x_it)^T W p >= b_i for every sequence i
    and token t != alpha_i, with b_i = 1, or 0 for the sequences flagged in ``relaxed``.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence (0-based).
    W : (d, d) key-query matrix, or None for the identity.
    relaxed : (n,) bool mask of relaxed sequences, or None.
    solver : "fast" (default) or "cvxpy".
    tol : relative tolerance for a constraint to count as tight (support):
        |value - b_i| <= tol * max(1, ||k_{i,alpha_i} - k_it|| ||p||).

    Returns
    -------
    SVMResult

    Raises
    ------
    ValueError : bad inputs, or no p satisfies the constraints (the message names the sequence
        or a small group of sequences that conflict).
    RuntimeError : cvxpy/Clarabel fails, or calls a feasible (badly scaled) problem infeasible.
    """
    X = _checks.tokens(X)
    W = _checks.key_matrix(W, X.shape[2])
    D, alpha, b, relaxed = _att_inputs(X, alpha, W, relaxed)
    solver = _solver(solver)
    tol = _checks.positive_float(tol, "tol")
    n, T, d = D.shape
    G, h, seq, tok = _att_rows(D, alpha, b)

    mu = np.zeros((n, T))
    if relaxed.all():  # every right-hand side is 0: p = 0 is optimal (margin inf)
        p = np.zeros(d)
    elif solver == "fast":
        solution = _solve_ldp(G, h)
        if solution is None:
            raise _selection_infeasible(D, alpha, b)
        p = solution.p
        mu[seq, tok] = solution.mu
    else:
        problem, p_var = att_svm_problem(X, alpha, W, relaxed)
        if not _solve_cvxpy(problem):
            raise _selection_infeasible(D, alpha, b)
        p = np.asarray(p_var.value, dtype=np.float64)
        mu[seq, tok] = problem.constraints[0].dual_value / 2  # sum_squares has no 1/2

    others = _others(alpha, T)
    values = _values(D, p, others)
    norm = float(np.linalg.norm(p))
    support = others & _tight(values, b[:, None], np.linalg.norm(D, axis=2), norm, tol)
    return SVMResult(
        p=_readonly(p),
        margin=_margin(norm),
        constraints=_readonly(values),
        support=_readonly(support),
        alpha=_readonly(alpha),
        multipliers=_readonly(np.where(support, np.maximum(mu, 0.0), 0.0)),
        relaxed=_readonly(relaxed),
    )


def is_feasible(X, alpha, W=None, relaxed=None) -> bool:
    """Whether ATT-SVM for ``alpha`` has a solution; returns False instead of raising.

    Inputs are validated as in :func:`att_svm` (bad shapes still raise).
    """
    D, alpha, b, _ = _att_inputs(X, alpha, W, relaxed)
    G, h, _, _ = _att_rows(D, alpha, b)
    return _solve_ldp(G, h) is not None


# ----------------------------------------------------------------------------------------------
# Set-SVM: an optimal set of tokens per sequence (nonlinear heads)
# ----------------------------------------------------------------------------------------------


def _set_inputs(X, sets, W):
    X = _checks.tokens(X)
    n, T, d = X.shape
    W = _checks.key_matrix(W, d)
    return _keys(X, W), _checks.token_sets(sets, n, T, proper=True)


def _set_rows(K: np.ndarray, sets: np.ndarray):
    """Rows of the set problem, relative to the first token t0 of each set O_i.

    Equalities (k_{i,t0} - k_itau)^T p = 0 for tau in O_i, tau != t0, and inequalities
    (k_{i,t0} - k_itau)^T p >= 1 for tau outside O_i (given the equalities, these imply the
    inequalities for every t in O_i). Returns (E, E_seq, G, G_seq) with the sequence of each row.
    """
    first = np.argmax(sets, axis=1)
    D = _differences(K, first)
    equal = sets & _others(first, K.shape[1])
    return D[equal], np.nonzero(equal)[0], D[~sets], np.nonzero(~sets)[0]


def _set_ldp(E: np.ndarray, G: np.ndarray) -> np.ndarray | None:
    """min ||p|| s.t. E p = 0, G p >= 1: write p = N q with N an orthonormal basis of null(E);
    then ||p|| = ||q|| and the problem is the least-distance program G N q >= 1.

    Singular values of E below 1e-12 times the largest row norm count as zero, so that keys
    tied up to rounding give an exact tie.
    """
    ones = np.ones(len(G))
    if len(E) == 0:
        solution = _solve_ldp(G, ones)
        return None if solution is None else solution.p
    _, singular, Vt = np.linalg.svd(E)
    scale = np.linalg.norm(np.vstack([E, G]), axis=1).max()
    N = Vt[np.sum(singular > 1e-12 * scale) :].T  # (d, dim null(E))
    if N.shape[1] == 0:
        return None
    solution = _solve_ldp(G @ N, ones)
    return None if solution is None else N @ solution.p


def set_svm_problem(X, sets, W=None) -> tuple[cp.Problem, cp.Variable]:
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
    (problem, p)
    """
    K, sets = _set_inputs(X, sets, W)
    equal_rows, above_rows = [], []
    for keys, inside in zip(K, sets):
        O, rest = np.flatnonzero(inside), np.flatnonzero(~inside)
        equal_rows += [keys[t] - keys[tau] for t in O for tau in O if t < tau]
        above_rows += [keys[t] - keys[tau] for t in O for tau in rest]
    p = cp.Variable(K.shape[2], name="p")
    constraints = [np.array(above_rows) @ p >= 1]
    if equal_rows:
        constraints.append(np.array(equal_rows) @ p == 0)
    return cp.Problem(cp.Minimize(cp.sum_squares(p)), constraints), p


def set_svm(X, sets, W=None, solver: str = "fast", tol: float = 1e-8) -> SetSVMResult:
    """Max-margin selection of a *set* of tokens per sequence.

    Solves argmin ||p|| s.t. (x_it - x_itau)^T W p = 0 for t, tau in O_i and
    (x_it - x_itau)^T W p >= 1 for t in O_i, tau not in O_i. With one token per set it is
    :func:`att_svm`.

    Parameters
    ----------
    X : (n, T, d) tokens.
    sets : (n, T) bool, the optimal set O_i of each sequence (at least one True and one False).
    W : (d, d) key-query matrix, or None for the identity.
    solver : "fast" (default) or "cvxpy".
    tol : relative tolerance for a constraint to count as tight (as in :func:`att_svm`).

    Returns
    -------
    SetSVMResult
    """
    K, sets = _set_inputs(X, sets, W)
    solver = _solver(solver)
    tol = _checks.positive_float(tol, "tol")
    E, E_seq, G, G_seq = _set_rows(K, sets)

    if solver == "fast":
        p = _set_ldp(E, G)
        feasible = p is not None
    else:
        problem, p_var = set_svm_problem(K, sets)
        feasible = _solve_cvxpy(problem)
        p = None if not feasible else np.asarray(p_var.value, dtype=np.float64)
    if not feasible:
        raise _set_infeasible(K, sets, E, E_seq, G, G_seq)

    scores = K @ p
    lowest_in_set = np.where(sets, scores, np.inf).min(axis=1)
    values = np.where(sets, np.inf, lowest_in_set[:, None] - scores)
    norm = float(np.linalg.norm(p))
    sizes = np.linalg.norm(_differences(K, np.argmax(sets, axis=1)), axis=2)
    return SetSVMResult(
        p=_readonly(p),
        margin=_margin(norm),
        constraints=_readonly(values),
        support=_readonly(~sets & _tight(values, 1.0, sizes, norm, tol)),
        sets=_readonly(sets),
    )


def _set_infeasible(K, sets, E, E_seq, G, G_seq) -> Exception:
    def feasible(group: list[int]) -> bool:
        return _set_ldp(E[np.isin(E_seq, group)], G[np.isin(G_seq, group)]) is not None

    def alone(i: int) -> str | None:
        if feasible([i]):
            return None
        inside = np.flatnonzero(sets[i]).tolist()
        return (
            f"in sequence {i} no p gives the tokens {inside} one common score above all "
            "other tokens"
        )

    def jointly(group: list[int]) -> str:
        return (
            f"every sequence is feasible on its own, but sequences {group} cannot be served "
            "by one common p"
        )

    return _explain_infeasible("sets: Set-SVM is infeasible:", len(sets), feasible, alone, jointly)


# ----------------------------------------------------------------------------------------------
# v-SVM: the classifier on the selected tokens
# ----------------------------------------------------------------------------------------------


def _v_inputs(R, Y):
    R = _matrix(R, "R")
    return R, _checks.labels(Y, R.shape[0])


def v_svm_problem(R, Y) -> tuple[cp.Problem, cp.Variable]:
    """v-SVM as a cvxpy problem: min ||v||^2 s.t. Y_i v^T r_i >= 1.

    Parameters
    ----------
    R : (n, d) selected tokens r_i.
    Y : (n,) labels in {-1, +1}.

    Returns
    -------
    (problem, v)
    """
    R, Y = _v_inputs(R, Y)
    v = cp.Variable(R.shape[1], name="v")
    problem = cp.Problem(cp.Minimize(cp.sum_squares(v)), [cp.multiply(Y, R @ v) >= 1])
    return problem, v


def v_svm(R, Y, solver: str = "fast", tol: float = 1e-8) -> VSVMResult:
    """Max-margin classifier through the origin: v^mm = argmin ||v|| s.t. Y_i v^T r_i >= 1.

    Parameters
    ----------
    R : (n, d) selected tokens r_i (e.g. ``X[range(n), alpha]``).
    Y : (n,) labels in {-1, +1}.
    solver : "fast" (default) or "cvxpy".
    tol : relative tolerance for a sample to count as a support vector:
        |Y_i v^T r_i - 1| <= tol * max(1, ||r_i|| ||v||).

    Returns
    -------
    VSVMResult
    """
    R, Y = _v_inputs(R, Y)
    solver = _solver(solver)
    tol = _checks.positive_float(tol, "tol")
    G = Y[:, None] * R
    ones = np.ones(len(G))

    if solver == "fast":
        solution = _solve_ldp(G, ones)
        if solution is None:
            raise _v_infeasible(G)
        v, mu = solution.p, solution.mu
    else:
        problem, v_var = v_svm_problem(R, Y)
        if not _solve_cvxpy(problem):
            raise _v_infeasible(G)
        v, mu = np.asarray(v_var.value, dtype=np.float64), problem.constraints[0].dual_value / 2

    margins = G @ v
    support = _tight(margins, 1.0, np.linalg.norm(R, axis=1), float(np.linalg.norm(v)), tol)
    return VSVMResult(
        v=_readonly(v),
        margin=_margin(float(np.linalg.norm(v))),
        margins=_readonly(margins),
        support=_readonly(support),
        multipliers=_readonly(np.where(support, np.maximum(mu, 0.0), 0.0)),
    )


def _v_infeasible(G: np.ndarray) -> Exception:
    def feasible(group: list[int]) -> bool:
        return _solve_ldp(G[group], np.ones(len(group))) is not None

    def alone(i: int) -> str | None:
        return None if feasible([i]) else f"row {i} of R is zero, so Y_i v^T r_i = 0 for every v"

    def jointly(group: list[int]) -> str:
        return f"no v has Y_i v^T r_i > 0 for all of the samples {group}"

    prefix = "R, Y: the selected tokens are not linearly separable through the origin:"
    return _explain_infeasible(prefix, len(G), feasible, alone, jointly)


# ----------------------------------------------------------------------------------------------
# W-SVM: the key-query matrix with the smallest Frobenius norm
# ----------------------------------------------------------------------------------------------


def _w_inputs(X, alpha, Z):
    X = _checks.tokens(X)
    n, T, d = X.shape
    alpha = _checks.indices(alpha, n, T)
    if np.ndim(Z) == 1:
        Z = _checks.vector(Z, d, "Z")
        if not Z.any():
            raise ValueError("Z: the query vector is zero, so x^T W z = 0 for every W")
    else:
        Z = _checks.batched_vector(Z, d, "Z")
        if Z.shape != (n, d):
            raise ValueError(f"Z: expected shape ({d},) or ({n}, {d}), got {Z.shape}")
    return _differences(X, alpha), alpha, Z


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


def w_svm_problem(X, alpha, Z) -> tuple[cp.Problem, cp.Variable]:
    """W-SVM as a cvxpy problem: min ||W||_F^2 s.t. (x_{i,alpha_i} - x_it)^T W z_i >= 1.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    Z : (n, d) one query per sequence, or (d,) one query for all.

    Returns
    -------
    (problem, W) with W a (d, d) variable.
    """
    D, alpha, Z = _w_inputs(X, alpha, Z)
    n, T, d = D.shape
    seq, tok = np.nonzero(_others(alpha, T))
    differences, queries = D[seq, tok], np.broadcast_to(Z, (n, d))[seq]
    W = cp.Variable((d, d), name="W")
    constraints = [cp.sum(cp.multiply(differences @ W, queries), axis=1) >= 1]
    return cp.Problem(cp.Minimize(cp.sum_squares(W)), constraints), W


def w_svm(X, alpha, Z, solver: str = "fast", tol: float = 1e-8) -> WSVMResult:
    """Max-margin key-query matrix: W^mm = argmin ||W||_F s.t. (x_{i,alpha_i} - x_it)^T W z_i >= 1.

    With one query ``Z = p`` of shape (d,) for every sequence the fast solver uses the closed
    form W^mm = u^mm p^T / ||p||^2 with u^mm the ATT-SVM solution on the raw tokens (W = I):
    the constraints only see u = W p, and the smallest W with W p = u is u p^T / ||p||^2.

    Parameters
    ----------
    X : (n, T, d) tokens.
    alpha : (n,) selected token of each sequence.
    Z : (n, d) the query z_i of each sequence (self-attention), or (d,) one query p for all.
    solver : "fast" (default) or "cvxpy".
    tol : relative tolerance for a constraint to count as tight:
        |value - 1| <= tol * max(1, ||x_{i,alpha_i} - x_it|| ||z_i|| ||W||_F).

    Returns
    -------
    WSVMResult
    """
    D, alpha, Z = _w_inputs(X, alpha, Z)
    solver = _solver(solver)
    tol = _checks.positive_float(tol, "tol")
    n, T, d = D.shape
    others = _others(alpha, T)

    if solver == "fast" and Z.ndim == 1:  # closed form from u^mm = ATT-SVM on the raw tokens
        u = _solve_ldp(D[others], np.ones(others.sum()))
        W = None if u is None else np.outer(u.p, Z) / (Z @ Z)
    elif solver == "fast":
        G, _, _ = _w_rows(D, alpha, Z)
        solution = _solve_ldp(G, np.ones(len(G)))
        W = None if solution is None else solution.p.reshape(d, d)
    else:
        problem, W_var = w_svm_problem(X, alpha, Z)
        W = np.asarray(W_var.value, dtype=np.float64) if _solve_cvxpy(problem) else None
    if W is None:
        raise _w_infeasible(D, alpha, Z)

    queries = np.broadcast_to(Z, (n, d))
    values = np.where(others, np.einsum("ita,ab,ib->it", D, W, queries), np.inf)
    norm = float(np.linalg.norm(W))
    sizes = np.linalg.norm(D, axis=2) * np.linalg.norm(queries, axis=1)[:, None]
    return WSVMResult(
        W=_readonly(W),
        norm=norm,
        constraints=_readonly(values),
        support=_readonly(others & _tight(values, 1.0, sizes, norm, tol)),
        alpha=_readonly(alpha),
    )


def _w_infeasible(D: np.ndarray, alpha: np.ndarray, Z: np.ndarray) -> Exception:
    n, T, d = D.shape
    queries = np.broadcast_to(Z, (n, d))
    G, seq, _ = _w_rows(D, alpha, Z)

    def feasible(group: list[int]) -> bool:
        rows = np.isin(seq, group)
        return _solve_ldp(G[rows], np.ones(rows.sum())) is not None

    def alone(i: int) -> str | None:
        if feasible([i]):
            return None
        if not queries[i].any():
            return f"the query z_{i} of sequence {i} is zero, so x^T W z_{i} = 0 for every W"
        return _unrankable(D, i, alpha, "W")

    def jointly(group: list[int]) -> str:
        return _not_jointly(group, "W")

    return _explain_infeasible("alpha: W-SVM is infeasible:", n, feasible, alone, jointly)
