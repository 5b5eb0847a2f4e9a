"""The nuclear-norm W-SVM (:func:`~maxmargin.w_svm` with ``norm="nuclear"``), an SDP: solved on
its reduced core by Clarabel (or in closed form for one shared query), polished by Newton's
method on its active set, and certified by its KKT conditions to ``NUCLEAR_TOL``
(re-exported by :mod:`maxmargin.svm`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import _infeasibility
from . import _least_distance as _ldp
from ._forward import _others
from ._svmresults import _nuclear_norm
from ._svmsolve import (Program, _clarabel_certified, _exponent, _kkt_verdict, _multipliers, _run,
                        _solve_fast)
from ._winputs import _w_problem, _w_rows

if TYPE_CHECKING:
    import cvxpy as cp


#: Relative tolerance of the KKT certificate of the nuclear-norm W-SVM (each of primal
#: feasibility, `mu >= 0`, complementary slackness, `||Lambda||_2 <= 1`, `<Lambda, W> = ||W||_*` and
#: the duality gap, each relative to its own scale). Clarabel's interior point, run to 1e-10,
#: meets it with violations of 1e-13 to 1e-10 on random instances (n, T, d) up to (20, 5, 30),
#: and its Newton polish with about 1e-15: 1e-6 leaves four orders of magnitude for
#: worse-conditioned data, and a certified W is within about 3e-6 of the optimal value (relative)
#: where the constraint values are not the result of heavy cancellation (see ``_nuclear_kkt``).
NUCLEAR_TOL = 1e-6


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
    _clarabel_certified(problem, "X", "nuclear-norm W-SVM", "a feasible W", constraint)
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
    _kkt_verdict(_nuclear_kkt(rows_D, rows_Z, W, mu), NUCLEAR_TOL, "X", "nuclear-norm W-SVM")


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
