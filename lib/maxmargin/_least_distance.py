"""The least-distance program min ||p|| s.t. G p >= h: the fast engine behind every SVM.

Lawson and Hanson's reduction of the least-distance program to a non-negative least-squares
problem, run on a growing working set of constraints and polished by an exact
equality-constrained solve on its active rows. :func:`least_distance` is the validated public
entry (exported as ``mm.least_distance``); :func:`solve` and :func:`solve_with_equalities` take
validated float64 arrays and also return the multipliers.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass

import numpy as np

from . import _checks


@dataclass(frozen=True)
class Solution:
    """A least-distance point and its multipliers."""

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
    solution = solve(G, h, tol)
    return None if solution is None else solution.p


def _nnls_ldp(E: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Lawson and Hanson's LDP algorithm on E = [G^T; h^T] of shape (d + 1, m).

    With f = e_{d+1}, let u = argmin_{u >= 0} ||E u - f|| and r = E u - f. Then r = 0 certifies
    that {G p >= h} is empty (G^T u = 0 with h^T u = 1, Farkas), and otherwise
    p = -r[:d] / r[d] is the least-distance point, with ||r||^2 = 1 / (1 + ||p||^2).
    Returns (p, u), or None when empty.
    """
    from scipy.optimize import nnls  # deferred: importing SciPy costs about 0.5 s

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
    from scipy.optimize import nnls  # deferred: importing SciPy costs about 0.5 s

    with suppress(np.linalg.LinAlgError):
        mu = np.linalg.solve(G_A @ G_A.T, h_A)
        yield G_A.T @ mu, mu
    p = np.linalg.lstsq(G_A, h_A, rcond=None)[0]
    yield p, nnls(G_A.T, p)[0]


def solve(G: np.ndarray, h: np.ndarray, tol: float = 1e-10) -> Solution | None:
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
        return Solution(np.zeros(d), np.zeros(m))
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
    return Solution(p, mu_full)


def solve_with_equalities(E: np.ndarray, G: np.ndarray, h: np.ndarray) -> np.ndarray | None:
    """min ||p|| s.t. E p = 0, G p >= h: write p = N q with N an orthonormal basis of null(E);
    then ||p|| = ||q|| and the problem is the least-distance program G N q >= h.

    Singular values of E below 1e-12 times the largest row norm count as zero, so that rows
    equal up to rounding give an exact tie. Returns p (d,), or None when infeasible.
    """
    if len(E) == 0:
        solution = solve(G, h)
        return None if solution is None else solution.p
    _, singular, Vt = np.linalg.svd(E)
    scale = np.linalg.norm(np.vstack([E, G]), axis=1).max()
    N = Vt[np.sum(singular > 1e-12 * scale) :].T  # (d, dim null(E))
    if N.shape[1] == 0:
        return None
    solution = solve(G @ N, h)
    return None if solution is None else N @ solution.p
