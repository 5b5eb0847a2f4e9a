"""The least-distance program min ||p|| s.t. G p >= h: the fast engine behind every SVM.

Lawson and Hanson's reduction of the least-distance program to a non-negative least-squares
problem, run on a growing working set of constraints, then an exact solve on the active rows
that must pass a KKT certificate (:func:`certificate`). :func:`least_distance` is the validated
public entry (exported as ``mm.least_distance``); :func:`solve` and :func:`solve_with_equalities`
take validated float64 arrays and also return the multipliers.

Scale. The program is scale-covariant: with G -> c G the solution is p / c. :func:`solve`
works with q = p / L, where L = max_j h_j / ||g_j|| is the norm that the most demanding
constraint alone requires (a lower bound on ||p||, and scale-covariant like p), and scales back,
so that data of any magnitude representable in float64 (1e-150 to 1e150 and beyond) gives the
same answer, and every tolerance below is relative to the data. ||p|| / L >= 1 measures how
ill-conditioned the problem is.

Certificate (CERTIFICATE_TOL = 1e-9, on the rows scaled to unit length ||(g_j, h_j)|| = 1;
|.| is taken entrywise, so each scale is the size of the rounding error of its left side):

* primal feasibility  g_j^T p - h_j >= -tol * (|g_j|^T |p| + |h_j|) for every row;
* dual feasibility    mu_j >= 0 (after zeroing values above -tol * max |mu|);
* complementary slackness  |g_j^T p - h_j| <= tol * (|g_j|^T |p| + |h_j|) where mu_j > 0;
* stationarity        ||p - G^T mu|| <= tol * (||p|| + || |G|^T mu ||).

A point that passes is, up to a small factor, the exact KKT point of a problem whose rows differ
from the given ones by a relative 1e-9 entrywise (a backward error); its forward error is at
most about cond * 1e-9, with cond the condition number of the active rows.
When the Lawson-Hanson active set does not pass, an active-set refinement and then Clarabel
(through cvxpy) are tried; if nothing passes, :class:`IllConditionedError` reports the condition
number of the active rows.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from . import _checks

#: A polyhedron whose nearest point has norm above L / FEASIBILITY_TOL (L: module docstring)
#: counts as empty: a Farkas vector proves it, or IllConditionedError says it cannot tell.
FEASIBILITY_TOL = 1e-10
#: Relative tolerance of the KKT certificate of every returned point (see the module docstring).
CERTIFICATE_TOL = 1e-9
#: A Farkas vector u >= 0 with ||G^T u|| below this times sum u_j ||g_j|| (and h^T u > 0) proves
#: emptiness up to rounding; a larger residual with a huge norm bound means ill-conditioned.
ROUNDING = 1e-13


class IllConditionedError(ValueError):
    """A max-margin problem too ill-conditioned for float64: no point passes the KKT certificate
    (the message gives the condition number of the active constraints), or the feasible set,
    if not empty, lies beyond L / ``FEASIBILITY_TOL`` (`L = max_j h_j / ||g_j||`); then ``distance``
    is that lower bound on the norm of any feasible point, in units of L (else None).

    A subclass of ``ValueError``, raised by :func:`least_distance` and every SVM (``att_svm``,
    ``set_svm``, ``v_svm``, ``w_svm``, ...).

    Parameters
    ----------
    message : the explanation (the SVMs prefix it with the name of the data argument).
    distance : the lower bound on `||p|| / L` described above, or None (the default).

    Attributes
    ----------
    distance : float or None, as given.

    Examples
    --------
    Rows `p_1 >= 1` and `-p_1 + 1e-12 p_2 >= 1` need `p_2 >= 2e12`, while L = 1:

    >>> G = np.array([[1.0, 0.0], [-1.0, 1e-12]])
    >>> try:
    ...     mm.least_distance(G, [1.0, 1.0])
    ... except mm.IllConditionedError as error:
    ...     print(f"{error.distance:.1e}", isinstance(error, ValueError))
    2.0e+12 True
    """

    def __init__(self, message: str, distance: float | None = None):
        super().__init__(message)
        self.distance = distance


class ScaleError(ValueError):
    """The solution, or the scale L = max_j h_j / ||g_j||, is outside the range of float64."""


@dataclass(frozen=True)
class Solution:
    """A least-distance point and its multipliers."""

    p: np.ndarray  # (d,) the minimum-norm feasible point
    mu: np.ndarray | None  # (m,) multipliers >= 0 of min ||p||^2 / 2, with p = G^T mu; None
    # when they are not representable (they scale like 1 / c^2 when G scales like c)


def least_distance(G, h, *, feasibility_tol: float = FEASIBILITY_TOL) -> np.ndarray | None:
    """Minimum-norm point of the polyhedron {p : G p >= h}.

    Parameters
    ----------
    G : (m, d) constraint rows.
    h : (m,) right-hand sides.
    feasibility_tol : keyword-only, in (0, 1), default FEASIBILITY_TOL = 1e-10, relative to the data (not
        the SVMs' ``tol``, which says when a constraint is tight): a polyhedron whose nearest
        point has norm above L / feasibility_tol, with `L = max_j h_j / ||g_j||` the norm that the
        most demanding constraint alone requires, is reported as empty (a Farkas vector proves
        it).

    Returns
    -------
    (d,) array or None : the solution (it passes the KKT certificate stated in the module docstring
        of ``maxmargin._least_distance``), or ``None`` when the polyhedron is empty.

    Raises
    ------
    ValueError : G is not 2-D, h is not (m,), a value is NaN or inf, ``feasibility_tol`` is not in
        (0, 1), or the scale L or the solution leaves the range of float64 (naming G, h).
    TypeError : G or h is not a real numeric array (None included), or ``feasibility_tol`` is
        not a number.
    IllConditionedError : (a ValueError, its message starting "G, h:") no point passes the
        certificate, or emptiness cannot be decided (the message names a ``feasibility_tol``
        other than the default, which sets that resolution).

    Examples
    --------
    >>> mm.least_distance([[1.0, 1.0]], [2.0])  # the point of p_1 + p_2 >= 2 nearest to 0
    array([1., 1.])
    >>> print(mm.least_distance([[1.0, 0.0], [-1.0, 0.0]], [1.0, 1.0]))  # p_1 >= 1 and <= -1
    None
    """
    G = _checks.finite(_checks.as_float_array(G, "G"), "G")
    if G.ndim != 2:
        raise ValueError(f"G: expected shape (m, d), got an array with shape {G.shape}")
    h = _checks.vector(h, G.shape[0], "h")
    tol = _checks.positive_float(feasibility_tol, "feasibility_tol")
    if tol >= 1:
        raise ValueError(f"feasibility_tol: expected a number in (0, 1), got {tol:g} (every "
                         "feasible point has norm at least L, so above L / 1 nothing would count "
                         "as feasible)")
    try:
        solution = solve(G, h, tol)
    except IllConditionedError as error:
        setting = (f"; feasibility_tol = {tol:g} (the default is {FEASIBILITY_TOL:g}) sets the "
                   f"resolution to {1 / tol:.3g} L" if tol != FEASIBILITY_TOL else "")
        raise IllConditionedError(f"G, h: {error}{setting}", error.distance) from None
    except ScaleError as error:
        raise ValueError(f"G, h: {error}; rescale them") from None
    return None if solution is None else solution.p


def row_norms(A: np.ndarray) -> np.ndarray:
    """Euclidean norms of the rows of A (m, d) without overflow or underflow of the squares."""
    if A.size == 0:
        return np.zeros(A.shape[0])
    big = np.abs(A).max(axis=1)
    if np.all((big > 1e-140) & (big < 1e140)):  # fast path: no square under/overflows
        return np.sqrt(np.einsum("ij,ij->i", A, A))
    safe = np.where(big > 0, big, 1.0)
    return big * np.sqrt(np.einsum("ij,ij->i", A / safe[:, None], A / safe[:, None]))


def norm(a: np.ndarray) -> float:
    """||a|| of a vector without overflow or underflow of the squares."""
    a = np.ravel(a)
    top = float(np.abs(a).max(initial=0.0))
    if 1e-140 < top < 1e140:  # fast path: no square under/overflows
        return float(np.sqrt(a @ a))
    return float(row_norms(a[None])[0])


def _nnls_ldp(E: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Lawson and Hanson's LDP algorithm on E = [G^T; h^T] of shape (d + 1, m).

    With f = e_{d+1}, let u = argmin_{u >= 0} ||E u - f|| and r = E u - f. Then r = 0 certifies
    that {G p >= h} is empty (G^T u = 0 with h^T u = 1, Farkas), and otherwise
    p = -r[:d] / r[d] is the least-distance point, with ||r||^2 = 1 / (1 + ||p||^2).
    Returns (p or None when r[d] gives no finite point, u, r).
    """
    from scipy.optimize import nnls  # deferred: importing SciPy costs about 0.5 s

    d = E.shape[0] - 1
    f = np.zeros(d + 1)
    f[d] = 1.0
    u, _ = nnls(E, f, maxiter=50 * (d + 1) + 3 * E.shape[1])
    r = E @ u - f
    with np.errstate(all="ignore"):
        p = -r[:d] / r[d]
    return (p if r[d] < 0 and np.all(np.isfinite(p)) else None), u, r


def _farkas_bound(r: np.ndarray) -> float:
    """For u >= 0 with h^T u > 0, every feasible p has ||p|| >= h^T u / ||G^T u|| (since
    h^T u <= u^T G p <= ||G^T u|| ||p||); with r = E u - f of :func:`_nnls_ldp`, G^T u = r[:d]
    and h^T u = 1 + r[d]."""
    hu, residual = 1.0 + float(r[-1]), norm(r[:-1])
    if hu <= 0:
        return 0.0
    return np.inf if residual == 0 else hu / residual


def _farkas_exact(Gn: np.ndarray, u: np.ndarray) -> bool:
    """Whether G^T u vanishes to rounding, so that u proves the polyhedron empty."""
    return norm(Gn.T @ u) <= ROUNDING * float(u @ row_norms(Gn)) * np.sqrt(len(u))


def _on_active(Gn: np.ndarray, hn: np.ndarray, A: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, float]]:
    """Candidates (q, mu_A, cond) for min ||q|| s.t. Gn[A] q = hn[A], with q = Gn[A]^T mu_A and
    cond the condition number of the rows Gn[A] (ratio of extreme nonzero singular values).

    From the SVD Gn[A] = U S V^T: q = V S^-1 U^T h and mu = U S^-2 U^T h, which never forms
    Gn[A] Gn[A]^T (that would square the condition number). When the rows are dependent the
    multipliers are not unique; a second candidate takes mu >= 0 fitted by NNLS.
    """
    from scipy.optimize import nnls  # deferred: importing SciPy costs about 0.5 s

    GA, hA = Gn[A], hn[A]
    U, S, Vt = np.linalg.svd(GA, full_matrices=False)
    rank = int(np.sum(S > S[0] * 1e-14)) if len(S) and S[0] > 0 else 0
    if rank == 0:
        return
    U, S, Vt = U[:, :rank], S[:rank], Vt[:rank]
    c = U.T @ hA
    q = Vt.T @ (c / S)
    cond = float(S[0] / S[-1])
    yield q, U @ (c / S**2), cond
    if rank < len(A):
        yield q, nnls(GA.T, q, maxiter=10 * len(A) + 50)[0], cond


def certificate(Gn: np.ndarray, hn: np.ndarray, q: np.ndarray, mu: np.ndarray,
                tol: float = CERTIFICATE_TOL) -> float:
    """The largest KKT violation of (q, mu) for min ||q|| s.t. Gn q >= hn, each relative to its
    scale (see the module docstring); q passes the certificate when the result is <= tol."""
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(mu))):
        return np.inf
    absG = np.abs(Gn)
    scale = absG @ np.abs(q) + np.abs(hn)
    scale = np.where(scale > 0, scale, 1.0)
    slack = (Gn @ q - hn) / scale
    worst = max(0.0, -float(slack.min(initial=0.0)))                  # primal feasibility
    if mu.size:
        top = float(np.abs(mu).max())
        if top > 0:
            worst = max(worst, -float(mu.min()) / top)                 # dual feasibility
        worst = max(worst, float(np.abs(slack[mu > 0]).max(initial=0.0)))  # compl. slackness
    with np.errstate(over="ignore", invalid="ignore"):
        stationarity = norm(q - Gn.T @ mu)
    if not np.isfinite(stationarity):  # G^T mu overflows: inf / inf would read as no violation
        return np.inf
    if stationarity > 0:
        size = norm(q) + norm(absG.T @ np.abs(mu))
        worst = max(worst, stationarity / size if size > 0 else np.inf)
    return worst


def _refine(Gn, hn, A, tol, limit) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Active-set refinement from the rows A: solve on A exactly, drop a row with a negative
    multiplier or add the most violated row, until the certificate passes (at most ``limit``
    changes). Returns (q, mu, violation, cond) of the best candidate seen."""
    best = (np.zeros(Gn.shape[1]), np.zeros(len(hn)), np.inf, np.inf)
    A = np.unique(A)
    seen = set()
    for _ in range(limit):
        key = A.tobytes()
        if key in seen or len(A) == 0:
            break
        seen.add(key)
        candidates = list(_on_active(Gn, hn, A))
        if not candidates:
            break
        for q, mu_A, cond in candidates:
            mu = np.zeros(len(hn))
            small = mu_A.min() >= -tol * np.abs(mu_A).max()
            mu[A] = np.maximum(mu_A, 0.0) if small else mu_A
            violation = certificate(Gn, hn, q, mu, tol)
            if violation < best[2]:
                best = (q, mu, violation, cond)
            if violation <= tol:
                return best
        q, mu_A, cond = candidates[-1]
        if mu_A.min() < -tol * np.abs(mu_A).max():
            A = np.delete(A, int(np.argmin(mu_A)))
            continue
        slack = (Gn @ q - hn) / (np.abs(Gn) @ np.abs(q) + np.abs(hn))
        slack[A] = np.inf
        j = int(np.argmin(slack))
        if slack[j] >= -tol:
            break
        A = np.append(A, j)
    return best


def _clarabel_active(Gn: np.ndarray, hn: np.ndarray) -> np.ndarray | None:
    """Active rows of the normalized program according to Clarabel (the second method)."""
    import cvxpy as cp

    q = cp.Variable(Gn.shape[1])
    constraint = Gn @ q >= hn
    problem = cp.Problem(cp.Minimize(cp.sum_squares(q)), [constraint])
    try:
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    except cp.error.SolverError:
        return None
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or q.value is None:
        return None
    dual = np.asarray(constraint.dual_value, dtype=np.float64)
    return np.flatnonzero(dual > 1e-9 * max(float(dual.max(initial=0.0)), 1e-300))


def solve(G: np.ndarray, h: np.ndarray, tol: float = FEASIBILITY_TOL,
          certify: bool = True) -> Solution | None:
    """The fast solver behind :func:`least_distance`, also returning the multipliers.

    1. Solve for q = p / L (scale covariance, module docstring), with every row (g_j, h_j)
       scaled to unit length (the polyhedron does not change).
    2. Working set: solve the LDP on a few rows (those whose half-spaces come closest to the
       origin), add the most violated remaining rows, and repeat until no row is violated. The
       solution on a subset of the rows is a lower bound, so once it satisfies every row it is
       optimal; a Farkas vector on a subset proves the whole polyhedron empty (None), unless it
       only proves that every feasible point lies beyond 1 / tol (IllConditionedError).
    3. Exact solve on the active rows (u > 0), refined and then re-seeded by Clarabel until the
       KKT certificate passes (module docstring); IllConditionedError if it never does. With
       ``certify=False`` (a feasibility test) step 3 is skipped and ``mu`` is None.
    """
    m, d = G.shape
    if not np.any(h > 0):  # p = 0 is feasible, hence optimal
        return Solution(np.zeros(d), np.zeros(m))
    # 1. q = p / L with L = max_j h_j / ||g_j||, the norm that the most demanding constraint
    #    alone requires; row j of G q >= h / L, divided by ||(g_j L, h_j)||, is
    #    (g_j / ||g_j||, ratio_j) / hypot(1, ratio_j) with ratio_j = (h_j / ||g_j||) / L <= 1.
    norms = row_norms(G)
    if np.any((norms == 0) & (h > 0)):
        return None  # 0 >= h_j > 0
    rows = np.flatnonzero(norms > 0)  # all-zero rows read 0 >= h_j with h_j <= 0: never bind
    with np.errstate(all="ignore"):
        reach = h[rows] / norms[rows]
        L = float(reach.max())
        ratio = np.maximum(reach / L, -1e300)
        hyp = np.hypot(1.0, ratio)
        Gn = (G[rows] / norms[rows, None]) / hyp[:, None]
        hn = ratio / hyp
    if not (np.isfinite(L) and np.all(np.isfinite(Gn)) and np.all(np.isfinite(hn))):
        raise ScaleError(f"the ratios h_j / ||g_j|| (largest {L:.1e}) leave the range of float64")
    E = np.vstack([Gn.T, hn])  # (d + 1, m) with unit columns

    # 2. working set, seeded with the half-spaces nearest to the origin (largest hn)
    size = min(len(rows), 2 * (d + 1))
    work = np.zeros(len(rows), dtype=bool)
    work[np.argpartition(-hn, size - 1)[:size]] = True
    while True:
        q, u_work, r = _nnls_ldp(E[:, work])
        bound = _farkas_bound(r)
        if bound * tol > 1:  # every feasible point lies beyond the resolution 1 / tol
            if _farkas_exact(Gn[work], u_work):
                return None
            raise IllConditionedError(
                "the problem is ill-conditioned: it is infeasible, or feasible only at distance "
                f"at least {bound:.2e} times the norm L that its most demanding constraint "
                f"alone requires, beyond the resolution 1 / tol = {1 / tol:.0e}, and "
                "float64 cannot tell which", distance=bound)
        if q is None:  # ||q|| too large for r[d]: solve on the rows of the working set exactly
            sub = np.flatnonzero(work)
            q, _, violation, _ = _refine(Gn[sub], hn[sub], np.flatnonzero(u_work > 0),
                                         CERTIFICATE_TOL, 2 * d + 10)
            if violation > CERTIFICATE_TOL:
                raise IllConditionedError(
                    "the problem is ill-conditioned: the Lawson-Hanson residual vanishes to "
                    f"rounding (the solution has norm above about 1e8 times the norm L that its "
                    f"most demanding constraint alone requires, at least {bound:.2e} L) and no "
                    "point passes the KKT certificate")
        slack = Gn @ q - hn
        violated = np.flatnonzero((slack < -tol * max(1.0, norm(q))) & ~work)
        if len(violated) == 0:
            break
        if len(violated) > work.sum():  # at most double the working set, worst rows first
            violated = violated[np.argpartition(slack[violated], work.sum())[: work.sum()]]
        work[violated] = True
    u = np.zeros(len(rows))
    u[work] = u_work
    if not certify:  # only feasibility was asked: the Lawson-Hanson point satisfies every row
        with np.errstate(all="ignore"):
            return Solution(q * L, None)

    # 3. exact solve on the active rows, certified; refined, then re-seeded by Clarabel
    limit = 2 * d + 10
    q, mu, violation, cond = _refine(Gn, hn, np.flatnonzero(u > 0), CERTIFICATE_TOL, limit)
    if violation > CERTIFICATE_TOL:
        active = _clarabel_active(Gn, hn)
        if active is not None and len(active):
            second = _refine(Gn, hn, active, CERTIFICATE_TOL, limit)
            if second[2] < violation:
                q, mu, violation, cond = second
    if violation > CERTIFICATE_TOL:
        raise IllConditionedError(
            "the problem is ill-conditioned: no point passes the KKT certificate to relative "
            f"tolerance {CERTIFICATE_TOL:.0e} (best violation {violation:.1e}); the active "
            f"constraints have condition number {cond:.1e}")

    with np.errstate(all="ignore"):
        p = q * L
        mu_full = np.zeros(m)
        mu_full[rows] = (mu / hyp) * (L / norms[rows])  # G^T mu_full = L Gn^T mu = p
    if not np.all(np.isfinite(p)) or np.any((p == 0) & (q != 0)):
        raise ScaleError(f"the solution has norm {norm(q):.2e} * {L:.2e}, outside the range "
                         "of float64")
    representable = np.all(np.isfinite(mu_full)) and not np.any((mu_full[rows] == 0) & (mu > 0))
    return Solution(p, mu_full if representable else None)


def feasible(G: np.ndarray, h: np.ndarray, E: np.ndarray | None = None) -> bool:
    """Whether {p : G p >= h, E p = 0} has a point of norm at most L / FEASIBILITY_TOL (module
    docstring): False when it is empty, or when a Farkas vector proves every point lies farther
    (the ill-conditioned case of :func:`solve`); an uncertifiable solution still raises."""
    try:
        if E is None:
            return solve(G, h, certify=False) is not None
        return solve_with_equalities(E, G, h, certify=False) is not None
    except IllConditionedError as error:
        if error.distance is None:
            raise
        return False


def solve_with_equalities(E: np.ndarray, G: np.ndarray, h: np.ndarray,
                          certify: bool = True) -> np.ndarray | None:
    """min ||p|| s.t. E p = 0, G p >= h: write p = N q with N an orthonormal basis of null(E);
    then ||p|| = ||q|| and the problem is the least-distance program G N q >= h.

    Singular values of E below 1e-12 times its largest row norm count as zero, so that rows
    equal up to rounding give an exact tie, and so do rows of G N below 1e-12 times their row
    of G (a row in the span of E). Only E's own rows set that scale: rows of G a factor 1e12
    larger would otherwise cut every equation as rounding (the caller scales E's rows so that
    each group of equations counts). Returns p (d,), or None when infeasible.
    """
    scale = float(row_norms(E).max(initial=0.0)) if len(E) else 0.0
    if scale == 0:
        solution = solve(G, h, certify=certify)
        return None if solution is None else solution.p
    _, singular, Vt = np.linalg.svd(E / scale)
    N = Vt[np.sum(singular > 1e-12) :].T  # (d, dim null(E))
    if N.shape[1] == 0:
        return None
    GN = G @ N
    GN[row_norms(GN) <= 1e-12 * row_norms(G)] = 0.0  # rows in the span of E, up to rounding
    solution = solve(GN, h, certify=certify)
    return None if solution is None else N @ solution.p
